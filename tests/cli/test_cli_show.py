"""``fbo show``: every setting of an algorithm on a task, its default, meaning and symbol."""

from cli_helpers import fails_with, invoke


def test_show_prints_every_setting_with_the_tasks_default():
    r = invoke(["show", "fedbioacc-local", "--task", "hyperrep"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    for key in ("upper_lr", "lower_lr", "neumann_step", "local_steps", "clients", "participation", "eval_every"):
        assert key in text, key
    assert "γ, lower (y) step" in text and "η, upper (x) step" in text  # meaning and the paper's symbol
    r = invoke(["show", "fedbioac-local"])
    assert fails_with(r, "unknown", field="algorithm", value="fedbioac-local")
    assert "did you mean 'fedbioacc-local'" in " ".join(r.output.split())  # the nearest name offered


def test_show_into_a_pipe_is_a_narrow_listing_not_a_wide_table():
    # issue 61, item 8: a pipe got a ~330-column table; now every key on its line, the meanings wrapped at 80
    r = invoke(["show", "aggitd", "--task", "hyperrep"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(map(len, lines)) <= 80
    assert any(line.startswith("  outer_lr") for line in lines) and "│" not in r.output and "┃" not in r.output
