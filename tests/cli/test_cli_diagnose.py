"""``fbo diagnose``: a subcommand group with checked options."""

from cli_helpers import invoke


def test_diagnose_truncation_options_are_checked():
    r = invoke(["diagnose", "truncation", "--rounds", "-1"])
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "--rounds must be in [0, 100,000]" in said and "Traceback" not in r.output
    r = invoke(["diagnose", "truncation", "--help"])
    assert r.exit_code == 0 and "[default:" in r.stdout
