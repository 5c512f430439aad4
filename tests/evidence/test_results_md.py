"""``fbo_cli.runs.rundir``' Markdown cells: pipes escaped, numbers read well."""


def test_markdown_cells_escape_pipes_and_numbers_read_well():
    from markdown_it import MarkdownIt

    from fbo_cli.runs.table import fmt_num, md_row

    html = MarkdownIt("commonmark").enable("table").render(md_row(["a", "b"]) + "\n|---|---|\n" +
                                                           md_row(["x | y", 2]) + "\n")
    assert html.count("<td>") == 2 and "x | y" in html
    assert [fmt_num(v) for v in (1630.0, 3e7, 3e-5, 0.01, 0.9168, 0.0003)] == ["1630", "3e7", "3e-5", "0.01", "0.9168",
                                                                        "0.0003"]
