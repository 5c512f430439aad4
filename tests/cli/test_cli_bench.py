"""``fbo bench``: its options checked by the CLI (``BenchOptions``) before anything is timed."""

from cli_helpers import fails_with, invoke


def test_bench_options_are_checked():
    for args, kind, field in ((["bench", "--device", "tpu"], "bad_value", "--device"),
                              (["bench", "--against", "no-such-revision"], "not_found", "--against"),
                              (["bench", "--rounds", "0"], "bad_value", "--rounds"),
                              (["bench", "--cases", "no/such.yaml"], "not_found", "--cases")):
        r = invoke(args)
        assert fails_with(r, kind, field=field) and "Traceback" not in r.output, (args, r.output)
    r = invoke(["bench", "--help"])
    assert r.exit_code == 0 and "[default:" in r.stdout
