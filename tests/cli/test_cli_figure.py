"""``fbo figure``: a command per figure, with checked options."""

from cli_helpers import fails_with, invoke


def test_figure_options_are_checked():
    for args, kind, fields in ((["figure", "zohfl-fig2", "--from", "/nonexistent"], "not_found",
                                {"field": "--from", "path": "/nonexistent"}),
                               (["figure", "aggitd-fig2", "--format", "jpg"], "unknown",
                                {"field": "format", "value": "jpg"}),
                               (["figure", "codasca-imax", "/nonexistent"], "not_found", {"path": "/nonexistent"})):
        r = invoke(args)
        assert fails_with(r, kind, **fields) and "Traceback" not in r.output, (args, r.output)
    r = invoke(["figure", "zohfl-fig1", "--help"])
    assert r.exit_code == 0 and "[default:" in r.stdout
