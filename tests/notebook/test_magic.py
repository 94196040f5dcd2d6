"""%%caten in a real IPython InteractiveShell: options, cache, results and short error messages."""

from __future__ import annotations

import json

import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from caten_lab.errors import CompileError
from caten_lab.notebook import compile_bridge
from caten_lab.notebook.magic import CatenCellError

from .conftest import kernel_passes

MODEL = """
import numpy as np
from caten_lab.frontend import Tensor
a = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
w = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
x = Tensor.from_numpy(a, name="x")
y = ((x @ Tensor.from_numpy(w, name="w")) * 1.0 + 0.0).relu()
"""


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "caten_lab")
    return shell


def run(ip, line, cell):
    return ip.run_cell(f"%%caten {line}\n{cell}".replace("%%caten \n", "%%caten\n"))


def expected():
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
    w = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    return np.maximum(a @ w, 0)


def test_compiles_the_last_expression_runs_it_and_shows_the_inspector(ip):
    r = run(ip, "--check --force", MODEL + "y")
    assert r.error_in_exec is None, r.error_in_exec
    res = ip.user_ns["_caten"]
    np.testing.assert_allclose(res.outputs[0], expected(), rtol=1e-5, atol=1e-6)
    assert res.trace is not None and len(res.trace.records) >= 3
    assert res.inspector is not None and res.inspector.panes == ["graph", "profile", "c", "result"]
    assert res.run_s is not None and res.run_s >= 0
    import json

    data = json.loads(res.inspector.data_json)
    assert data["result"]["outputs"][0]["shape"] == "(3, 2)"
    assert "matches the NumPy interpreter" in data["result"]["note"]
    # the user's source lines reach the inspector (node.source -> the cell's text)
    assert any("Tensor.from_numpy" in t for t in data["source_lines"].values())


def test_out_names_the_value_to_compile_and_panes_select_what_is_shown(ip):
    r = run(ip, "-o y --panes graph,c --no-run", MODEL + "z = 1")
    assert r.error_in_exec is None, r.error_in_exec
    res = ip.user_ns["_caten"]
    assert res.outputs is None and res.inspector.panes == ["graph", "c"]
    r = run(ip, "--out result_tensor --no-run", MODEL + "y * 2")
    assert r.error_in_exec is None and type(ip.user_ns["result_tensor"]).__name__ == "Tensor"


def test_cache_is_keyed_by_cell_and_options_and_force_bypasses_it(ip):
    cell = MODEL + "y + 3.0"
    assert run(ip, "--no-run", cell).error_in_exec is None
    first = ip.user_ns["_caten"]
    assert run(ip, "--no-run", cell).error_in_exec is None
    again = ip.user_ns["_caten"]
    assert again.cached and again.program is first.program
    assert run(ip, "--no-run --force", cell).error_in_exec is None
    assert not ip.user_ns["_caten"].cached
    assert run(ip, "--no-run --panes graph", cell).error_in_exec is None  # other options: other key
    assert not ip.user_ns["_caten"].cached


def test_pass_selection(ip):
    names = compile_bridge.default_pipeline().names()
    keep = names[:2]
    r = run(ip, f"--no-run --passes {','.join(keep)}", MODEL + "y")
    assert r.error_in_exec is None, r.error_in_exec
    assert [rec.name for rec in ip.user_ns["_caten"].trace.records][: len(keep)] == keep
    r = run(ip, f"--no-run --skip {names[0]}", MODEL + "y")
    assert r.error_in_exec is None
    assert names[0] not in [rec.name for rec in ip.user_ns["_caten"].trace.records]


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("--bogus", "unrecognized arguments"),
        ("--backend cuda", "invalid choice"),
        ("--panes graph,asm", "--panes: unknown pane"),
        ("--symbols seq", "--symbols: expected NAME=INT"),
        ("--passes no_such_pass", "--passes: unknown pass"),
        ("--pipeline missing_var", "no such variable"),
        ("--symbols zz=3", "--symbols: unknown symbol(s) zz; the program's symbols: none"),
        ("--symbols n=-2", "--symbols: n = -2: symbol values must be non-negative"),
        ("--symbols n=\u00b3", "--symbols: expected NAME=INT"),
        ("--symbols n=1.5", "--symbols: expected NAME=INT"),
        ("--symbols n=1,n=2", "--symbols: n is given twice"),
        ('--out "y', "%%caten: cannot split the options '--out \"y': No closing quotation"),
        ("--out 'y", "No closing quotation"),
    ],
)
def test_bad_options_are_one_line_usage_errors(ip, capsys, line, fragment):
    r = run(ip, line, MODEL + "y")
    assert isinstance(r.error_in_exec, UsageError), r.error_in_exec
    assert fragment in str(r.error_in_exec)
    assert "\n" not in str(r.error_in_exec)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err


SYMBOLIC = """
import numpy as np
from caten_lab.frontend import Sym, build_graph, placeholder
n = Sym("n")
x = placeholder((n, 2), "float32", name="x")
g, _ = build_graph([(x * 2).sum(0)])
"""


def test_symbols_must_be_the_programs(ip):
    ip.user_ns["feed"] = {"x": np.ones((3, 2), np.float32)}
    r = run(ip, "--inputs feed --symbols n=3", SYMBOLIC + "g")
    assert r.error_in_exec is None, r.error_in_exec
    np.testing.assert_allclose(ip.user_ns["_caten"].outputs[0], [6.0, 6.0])
    r = run(ip, "--inputs feed --symbols n=3,m=4", SYMBOLIC + "g")
    assert isinstance(r.error_in_exec, UsageError)
    assert str(r.error_in_exec) == "--symbols: unknown symbol(s) m; the program's symbols: n"


def test_user_error_is_short_and_points_at_the_cell_line(ip, capsys):
    cell = MODEL + "bad = x + Tensor.from_numpy(np.ones((5, 4), np.float32))\nbad"
    r = run(ip, "", cell)
    err = r.error_in_exec
    assert isinstance(err, CatenCellError)
    text = "\n".join(err._render_traceback_())
    # the %%caten line is line 1, the cell body starts with an empty line: the failing line is 9,
    # named as IPython names the cell (In[n], ", line 9" as in its own tracebacks)
    at = f"In[{ip.execution_count}], line 9: bad = x + Tensor.from_numpy"
    assert at in text and "(3, 4)" in text, text
    out = capsys.readouterr().out
    assert "Traceback" not in out and at in out
    assert ip.user_ns["_caten_error"] is err


def test_debug_shows_the_real_exception(ip, capsys):
    cell = MODEL + "bad = x + Tensor.from_numpy(np.ones((5, 4), np.float32))\nbad"
    r = run(ip, "--debug", cell)
    assert type(r.error_in_exec).__name__ == "ShapeError"
    # IPython's traceback names the cell In[n] and shows the editor's line 9 with its text
    out = capsys.readouterr().out
    assert f"In[{ip.execution_count}]" in out and "line 9" in out and "bad = x + Tensor.from_numpy" in out, (
        out
    )


def test_node_sources_and_the_error_count_the_same_editor_lines(ip):
    """The Inspector's node sources say In[n]:line with the line the editor shows (the %%caten line is 1)."""
    r = run(ip, "--no-run --force", MODEL + "y")
    assert r.error_in_exec is None, r.error_in_exec
    data = json.loads(ip.user_ns["_caten"].inspector.data_json)
    cell = f"In[{ip.execution_count}]"
    # the editor's lines: 1 %%caten, 2 (empty), 3 import numpy, ..., 7 x = ..., 8 y = ...
    assert data["source_lines"][f"{cell}:7"] == 'x = Tensor.from_numpy(a, name="x")'
    assert data["source_lines"][f"{cell}:8"].startswith("y = ((x @ Tensor.from_numpy(w")
    assert all(src.startswith(cell + ":") for src in data["source_lines"]), data["source_lines"]


def test_rule_written_in_a_cell_is_located_in_that_cell(ip):
    r = ip.run_cell(
        "from caten_lab.air.rewriter import Pat, rule\n\n"
        "@rule('x*1 -> x', Pat('mul', ['x', 1.0]))\ndef times_one(m):\n    return m['x']\n",
        store_history=True,
    )
    assert r.error_in_exec is None, r.error_in_exec
    assert ip.user_ns["times_one"].location == f"In[{r.execution_count}]:3"


def test_plain_python_errors_and_bad_results(ip):
    r = run(ip, "", "1/0")
    assert isinstance(r.error_in_exec, CatenCellError)
    head = r.error_in_exec.lines[0]
    assert "ZeroDivisionError" in head and f"In[{ip.execution_count}], line 2: 1/0" in head, head
    r = run(ip, "", "x = 1")
    assert "nothing to compile" in str(r.error_in_exec)
    r = run(ip, "", "'text'")
    assert "cannot compile" in str(r.error_in_exec)
    r = run(ip, "", "x = 1\ndef f(:\n  pass")
    assert f"syntax error at In[{ip.execution_count}], line 3" in str(r.error_in_exec), r.error_in_exec


def test_failing_pass_is_named_and_the_partial_trace_kept(ip):
    from caten_lab.passes import FunctionPass

    def boom(graph, ctx):
        raise ValueError("this pass is broken")

    pm = compile_bridge.default_pipeline()
    pm.insert(0, FunctionPass("broken_pass", "raises", boom))
    ip.user_ns["pm_broken"] = pm
    r = run(ip, "--pipeline pm_broken", MODEL + "y")
    err = r.error_in_exec
    assert isinstance(err, CatenCellError)
    assert "broken_pass" in err.lines[0] and "this pass is broken" in "\n".join(err.lines)
    assert err.trace is not None and err.trace.records[-1].name == "broken_pass"
    from caten_lab.notebook import Inspector, show

    assert Inspector(ip.user_ns["_caten_error"]).pass_names == [
        "broken_pass"
    ]  # the partial trace can be inspected
    assert "broken_pass" in show(err).html


def test_c_compiler_errors_show_the_c_lines(ip, monkeypatch):
    c_source = "int f(void) {\n  int x = 1;\n  return y;\n}\n"

    def failing_compile(graph, **kw):
        err = CompileError("cc failed:\nkernel.c:3:10: error: 'y' undeclared (first use in this function)")
        err.c_source = c_source
        err.pass_name = "cc"
        raise err

    monkeypatch.setattr(compile_bridge, "compile_traced", failing_compile)
    r = run(ip, "--force", MODEL + "y")
    text = "\n".join(r.error_in_exec.lines)
    assert "pass 'cc'" in text and ">     3 |   return y;" in text and "2 |   int x = 1;" in text


def test_static_report_and_bare_graph_with_inputs(ip):
    from caten_lab.air import Graph

    g = Graph()
    a = g.insert("allocate", [], shape=(2, 2), dtype="float32", name="a")
    g.mark_output(g.insert("add", [g.insert("mul", [a, 1.0]), 0.0]))
    ip.user_ns.update(g_test=g, feed={"a": np.ones((2, 2), np.float32)})
    r = run(ip, "--static --inputs feed", "g_test")
    assert r.error_in_exec is None, r.error_in_exec
    np.testing.assert_array_equal(ip.user_ns["_caten"].outputs[0], np.ones((2, 2), np.float32))


def test_numpy_backend_runs_without_passes(ip):
    r = run(ip, "--backend numpy --force", MODEL + "y")
    assert r.error_in_exec is None, r.error_in_exec
    res = ip.user_ns["_caten"]
    np.testing.assert_allclose(res.outputs[0], expected(), rtol=1e-5, atol=1e-6)
    assert res.trace.records == [] and res.inspector.pass_names == []


def test_profile_times_kernels_for_the_kernel_lists_of_codegen_passes(ip):
    """--profile: Program.profile's rows reach the kernel list of every codegen pass (time per call)."""
    pm = compile_bridge.default_pipeline()
    for p in kernel_passes.toy_codegen_passes():
        pm.append(p)
    ip.user_ns["kir_pm"] = pm
    r = run(ip, "--profile --force --pipeline kir_pm", MODEL + "y")
    assert r.error_in_exec is None, r.error_in_exec
    res = ip.user_ns["_caten"]
    np.testing.assert_allclose(res.outputs[0], expected(), rtol=1e-5, atol=1e-6)
    kernels = [k.name for k in res.program.schedule.kernels]
    assert sorted(row["kernel"] for row in res.profile) == sorted(kernels)
    assert all(row["seconds"] >= 0 and row["calls"] == 1 for row in res.profile)
    data = json.loads(res.inspector.data_json)
    last = [p for p in data["passes"] if p["kir"]][-1]["kir"]
    assert last["profiled"]
    for f in last["functions"]:  # a function's rows: the kernels it implements (or its name)
        rows = [r for r in res.profile if r["kernel"] in f["kernels"]] or [
            r for r in res.profile if r["function"] == f["name"]
        ]
        assert (
            rows
            and f["calls"] == len(rows)
            and f["seconds"] == pytest.approx(sum(r["seconds"] for r in rows))
        )
    # without --profile the kernel lists carry no times
    run(ip, "--force --pipeline kir_pm", MODEL + "y")
    data = json.loads(ip.user_ns["_caten"].inspector.data_json)
    assert not [p for p in data["passes"] if p["kir"]][-1]["kir"]["profiled"]


def test_profile_needs_a_compiled_run(ip):
    r = run(ip, "--profile --no-run", MODEL + "y")
    assert isinstance(r.error_in_exec, UsageError)
    assert str(r.error_in_exec).startswith(
        "--profile times the compiled kernels: it needs the C backend and a run"
    )


def test_show_names_outputs_as_the_inspector_does(ip):
    r = run(ip, "", MODEL + "y")
    assert r.error_in_exec is None, r.error_in_exec
    res = ip.user_ns["_caten"]
    data = json.loads(res.inspector.data_json)
    name = data["result"]["outputs"][0]["name"]
    assert name == data["value_names"][str(res.graph.outputs[0])] == "out0"  # the graph's label for it too
    report = res.show().html
    assert f"<td><code>{name}</code></td>" in report and f"<code>{res.graph.outputs[0]}</code>" not in report


def test_cell_magic_help_names_the_cell_magic(ip):
    doc = ip.find_cell_magic("caten").__doc__
    assert "  %%caten [-o NAME]" in doc and "  %caten [" not in doc


def test_action_written_in_a_cell_is_located_in_that_cell(ip):
    """An @action error names the cell and the editor's line (and quotes it), not an ipykernel temp file."""
    r = ip.run_cell(
        "from caten_lab.workflow import action, i32\n\n"
        "def f(x: i32) -> i32:\n"
        "    return not_defined_anywhere(x)  # BAD\n\n"
        "action(f).check()\n",
        store_history=True,
    )
    err = r.error_in_exec
    assert err is not None and "not_defined_anywhere" in str(err)
    assert f"In[{r.execution_count}]:4: return not_defined_anywhere(x)  # BAD" in str(err), str(err)
