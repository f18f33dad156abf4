"""dpsense curator budget show|set|reset."""
from dpsense.cloud import cli
from dpsense.cloud.privacy.accountant import BudgetAccountant


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_set_show_reset(tmp_path, capsys):
    db = str(tmp_path / "b.db")
    rc, out, _ = run(capsys, "curator", "budget", "set", "--dataset", "sensors", "--epsilon", "1",
                     "--delta", "1e-6", "--db", db)
    assert rc == 0 and "budget     epsilon=1 delta=1e-06" in out
    BudgetAccountant(db).spend("sensors", 0.3, query="count")
    rc, out, _ = run(capsys, "curator", "budget", "show", "--dataset", "sensors", "--db", db)
    assert rc == 0 and "remaining  epsilon=0.7" in out and "count" in out
    rc, out, _ = run(capsys, "curator", "budget", "reset", "--dataset", "sensors", "--db", db)
    assert rc == 0 and "epsilon=0.3" in out
    rc, out, _ = run(capsys, "curator", "budget", "show", "--db", db)
    assert rc == 0 and "remaining  epsilon=1 " in out


def test_default_db_is_in_the_data_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DPSENSE_DATA_DIR", str(tmp_path / "data"))
    rc, _, _ = run(capsys, "curator", "budget", "set", "--dataset", "x", "--epsilon", "0.5")
    assert rc == 0
    assert (tmp_path / "data" / "budget.db").exists()


def test_errors(tmp_path, capsys):
    db = str(tmp_path / "b.db")
    # A missing database or data set is a refusal, exit 1; bad values exit 2 (docs/curator.md).
    rc, _, err = run(capsys, "curator", "budget", "show", "--db", db)
    assert rc == 1 and "no budget database" in err
    run(capsys, "curator", "budget", "set", "--dataset", "s", "--epsilon", "1", "--db", db)
    rc, _, err = run(capsys, "curator", "budget", "reset", "--dataset", "nope", "--db", db)
    assert rc == 1 and "no budget" in err
    rc, _, err = run(capsys, "curator", "budget", "set", "--dataset", "s", "--epsilon", "-1", "--db", db)
    assert rc == 2 and "epsilon" in err
    rc, _, err = run(capsys, "curator", "budget", "set", "--dataset", "s", "--epsilon", "1", "--delta", "1",
                     "--db", db)
    assert rc == 2 and "delta" in err
    try:
        rc = cli.main(["curator", "budget", "set", "--dataset", "s", "--epsilon", "abc", "--db", db])
    except SystemExit as e:
        rc = e.code
    assert rc == 2
