"""The comparison view over run folders: overlaid curves and the table from runstore.compare."""

from __future__ import annotations

from ui_records import step_records

from workbench.events import EventWriter
from workbench.runstore import create_run_dir, write_json_atomic
from workbench.ui import compare_view


def _fake_run(root, cfg, sps, ranks=1):
    run_dir = create_run_dir(cfg, root)
    for r in range(ranks):
        w = EventWriter(run_dir, rank=r)
        for rec in step_records(12, rank=r, samples_per_s=sps):
            w.write("step", **{k: v for k, v in rec.items() if k not in ("event", "t", "rank", "attempt")})
        w.close()
    write_json_atomic(
        run_dir / "summary.json",
        {
            "status": "completed",
            "samples_per_s": sps * ranks,
            "final_loss": 0.5,
            "eval_accuracy": 0.9,
            "rss_gib": 0.4,
            "step_time_ms_median": 1000 / sps,
        },
    )
    return run_dir


def test_table_and_overlaid_curves(runs_root, smoke):
    a = _fake_run(runs_root, smoke, 100.0)
    b = _fake_run(runs_root, smoke.replace(**{"precision.dtype": "bf16"}), 150.0, ranks=2)
    view = compare_view([a, b])
    assert view.frame["run"].tolist() == [a.name, b.name]
    assert view.frame["speedup"].tolist() == [1.0, 3.0]
    assert a.name in view.table.value and "3.00x" in view.table.value
    assert view.frame["verdict"].tolist()[0] == "baseline"
    head = view.table.value.split("</thead>")[0]  # titles a person reads, with their units
    assert "<th>samples/s</th>" in head and "<th>step (ms)</th>" in head and "samples_per_s" not in head
    cells = view.table.value.split("<td>")[1:]  # a reader never meets a placeholder for no value
    assert not any(c.startswith(("None<", "nan<")) for c in cells), view.table.value
    assert [t.name for t in view.loss_fig.data] == [a.name, b.name]
    assert list(view.speed_fig.data[1].y)[0] == 300.0  # summed over both ranks
    assert set(view.picker.value) == {str(a), str(b)}
    assert len(view.picker.options) == 2  # the run store's runs


def test_picker_changes_the_selection(runs_root, smoke):
    a = _fake_run(runs_root, smoke, 100.0)
    b = _fake_run(runs_root, smoke, 200.0)
    view = compare_view([a])
    view.picker.value = (str(b), str(a))
    assert view.frame["run"].tolist() == [b.name, a.name]
    assert view.frame["speedup"].tolist() == [1.0, 0.5]
    view.picker.value = ()
    assert "no runs to compare yet" in view.table.value
    assert all(len(t.x) == 0 for t in view.loss_fig.data)


def test_add_appends_a_run_without_a_picker(runs_root, smoke):
    a = _fake_run(runs_root, smoke, 100.0)
    view = compare_view(picker=False)
    assert "no runs" in view.table.value
    view.add(a)
    assert view.frame["run"].tolist() == [a.name]
