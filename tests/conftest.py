import pytest
import torch


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)
    yield


@pytest.fixture
def stop_after_checkpoint(monkeypatch):
    """``stop(cfg)`` runs ``cfg`` until its first checkpoint is written, then stops it as SIGKILL would
    (no summary): the run directory is left partial, ready to resume."""
    import fbo_cli.runs.checkpoint as runner
    from fbo_cli.runs.runner import execute

    real = runner.save_checkpoint

    def save_then_die(path, cfg, b, *a):
        real(path, cfg, b, *a)
        raise KeyboardInterrupt

    def stop(cfg):
        monkeypatch.setattr(runner, "save_checkpoint", save_then_die)
        try:
            with pytest.raises(KeyboardInterrupt):
                execute(cfg)
        finally:
            monkeypatch.setattr(runner, "save_checkpoint", real)

    return stop
