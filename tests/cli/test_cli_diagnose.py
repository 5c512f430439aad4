"""``fbo diagnose``: a subcommand group with checked options."""

from cli_helpers import error_of, fails_with, invoke


def test_diagnose_truncation_options_are_checked():
    r = invoke(["diagnose", "truncation", "--rounds", "-1"])
    assert fails_with(r, "bad_value", value=(-1, 1000)) and "--rounds" in error_of(r).field, r.output
    assert "Traceback" not in r.output
    r = invoke(["diagnose", "truncation", "--help"])
    assert r.exit_code == 0 and "[default:" in r.stdout
