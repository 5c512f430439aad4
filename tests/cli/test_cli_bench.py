"""``fbo bench``: its options checked by the CLI (``BenchOptions``) before anything is timed."""

from cli_helpers import invoke


def test_bench_options_are_checked():
    for args, what in ((["bench", "--device", "tpu"], "--device must be cpu or cuda"),
                       (["bench", "--against", "no-such-revision"], "neither a checkout with fbo_cli/ nor a git"),
                       (["bench", "--rounds", "0"], "--rounds must be >= 1"),
                       (["bench", "--cases", "no/such.yaml"], "--cases: no file at no/such.yaml")):
        r = invoke(args)
        assert r.exit_code == 2 and what in " ".join(r.output.split()) and "Traceback" not in r.output, args
    r = invoke(["bench", "--help"])
    assert r.exit_code == 0 and "[default:" in r.stdout
