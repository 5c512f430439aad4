"""``fbo figure``: a command per figure, with checked options."""

from cli_helpers import invoke


def test_figure_options_are_checked():
    for args, what in ((["figure", "zohfl-fig2", "--from", "/nonexistent"], "--from: no results folder"),
                       (["figure", "aggitd-fig2", "--format", "jpg"], "--format: unknown format jpg"),
                       (["figure", "codasca-imax", "/nonexistent"], "no runs.csv")):
        r = invoke(args)
        assert r.exit_code == 2 and what in " ".join(r.output.split()) and "Traceback" not in r.output, args
    r = invoke(["figure", "zohfl-fig1", "--help"])
    assert r.exit_code == 0 and "[default:" in r.stdout
