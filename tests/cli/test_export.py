"""`workbench export` writes an export from a config file, and refuses a folder without one."""

from __future__ import annotations


from workbench.config import RunConfig


def test_cli_export(tmp_path, capsys):
    from workbench.cli import main

    cfg_file = tmp_path / "cfg.json"
    RunConfig.smoke().save(cfg_file)
    assert main(["export", "--config", str(cfg_file), "--to", str(tmp_path / "out")]) == 0
    assert "python train.py" in capsys.readouterr().out
    assert main(["export", "--run", str(tmp_path), "--to", str(tmp_path / "x")]) == 2
    assert "has no config.json" in capsys.readouterr().err
