"""The compare bar with ``--jobs 2`` (issue 61, item 8): its count moves with the rounds of the runs in flight,
so that it shows progress inside runs and a time left before the first run ends."""

from rich.progress import Progress

from fbo_cli.grids.executors.driver import overall_count


def test_the_overall_bar_counts_the_runs_in_flight_by_their_rounds():
    now = [0.0]
    prog = Progress(get_time=lambda: now[0], auto_refresh=False, disable=True)
    overall = prog.add_task("runs", total=3)
    out = [None, None, None]  # three runs on two jobs: none has ended yet
    overall_count(prog, overall, out, {(1, 0): 0.0, (1, 1): 0.0})
    for t, share in ((10.0, 0.25), (20.0, 0.5)):  # their rounds, as the workers report them
        now[0] = t
        overall_count(prog, overall, out, {(1, 0): share, (1, 1): share})
    task = prog.tasks[0]
    assert task.completed == 1.0 and task.time_remaining == 40  # 2 runs' worth left at 0.05 runs a second
    out[0] = {"status": "done"}  # one ends: counted whole, the other still by its rounds
    overall_count(prog, overall, out, {(1, 1): 0.6})
    assert prog.tasks[0].completed == 1.6
