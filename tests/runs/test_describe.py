"""Every setting has a meaning, declared with it (``bounded(..., doc=...)``), and ``fbo show`` prints it."""

from dataclasses import fields

from fbo_cli.algorithms import REGISTRY
from fbo_cli.algorithms.template import TemplateDecayFedNest, TemplateFedSGD
from fbo_cli.runs.config import RunSettings
from fbo_cli.runs.describe import describe
from fbo_cli.tasks import TASKS


def test_every_setting_of_every_algorithm_task_and_run_declares_its_meaning():
    classes = {RunSettings, TemplateFedSGD.HP, TemplateDecayFedNest.HP}
    classes |= {e.cls.HP for e in REGISTRY.values()} | {t.Params for t in TASKS.values()}
    missing = [f"{c.__qualname__}.{f.name}" for c in classes for f in fields(c)
               if not f.metadata.get("doc", "").strip()]
    assert not missing, f"settings without a meaning (bounded(..., doc=...)): {missing}"
    assert len(classes) > 15 and sum(len(fields(c)) for c in classes) > 150


def test_describe_gives_every_setting_with_its_default_bounds_and_meaning():
    for name, e in REGISTRY.items():
        for task in e.tasks:
            d = describe(name, task)
            assert [s.kind for s in d.sections] == ["run", "task", "hp"]
            assert all(st.meaning for s in d.sections for st in s.settings), (name, task)
    d = describe("fedbio", "hyperrep")
    hp = {s.name: s for s in d.sections[2].settings}
    assert hp["upper_lr"].default == 0.16 and "the paper's: 100.0" in hp["upper_lr"].note
    assert hp["local_steps"].bounds == {"ge": 1, "le": 100_000} and hp["local_steps"].bounds_text() == ">= 1, <= 100000"
    run = {s.name: s for s in d.sections[0].settings}
    assert run["clients"].meaning == "number of clients M"
