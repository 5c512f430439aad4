"""A CODA+ subclass written against the old ClientRuns helpers (``axpy``, ``runs_view``, ``glob``, before the step
was written in the paper's words) still runs, alone and in a batch, with the built-in's numbers bit for bit."""

import csv

from fbo_cli.grids.run_batches import execute_batch
from fbo_cli.runs.config import resolve

OLD = '''
from fbo_cli.algorithms.codasca import CodaPlus


class OldCoda(CodaPlus):
    def local_grads(self):
        pos, valid = self.sampler.next()
        batch = self.client_batch(pos, valid)
        self.ledger.oracle("grads", self.sampler.active, self.sampler.rows)
        gv, ga = self.task.grads("objective", self.vk, self.ak, batch)
        g, gr = self.gamma, self.runs_view(gv)
        self.axpy(self.axpy(gr, self.runs_view(self.vk), g), self.glob(self.ref), g, sub=True)
        return gv, ga
'''
AUC = {"dataset": "synth-c100", "clients": 4, "I": 3, "T0": 5, "batch_size": 8, "hidden": 8, "holdout": True,
       "rounds": 6, "eval_every": 2, "threads": 1, "seed": 0}


def rows(cfg):
    return [{k: v for k, v in r.items() if k != "train_time"}
            for r in csv.DictReader((cfg.run_dir / "metrics.csv").read_text().splitlines())]


def test_a_subclass_written_for_the_old_helpers_runs_alone_and_batched_as_the_built_in(tmp_path, monkeypatch):
    (tmp_path / "old.py").write_text(OLD)
    monkeypatch.chdir(tmp_path)
    cfgs = {algo: [resolve("auc", algo, {**AUC, "out_dir": str(tmp_path / algo.split(":")[-1]), "eta": eta})
                   for eta in (0.05, 0.1)] for algo in ("codaplus", "./old.py:OldCoda")}
    for cs in cfgs.values():
        assert [s["status"] for s in execute_batch(cs)] == ["done", "done"]
        assert all(s.get("batch_runs") == 2 for s in (execute_batch(cs)))  # reused: the batch ran
    for new, old in zip(*cfgs.values(), strict=True):
        assert rows(new) == rows(old) and len(rows(new)) > 1
