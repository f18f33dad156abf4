"""`dpsense query identify`: answers, charges the budget, refuses over budget."""
from dpsense.cloud import cli


def test_identify_charges_and_refuses(tmp_path, capsys):
    csv = tmp_path / "d.csv"
    csv.write_text("a,b\n0,0\n0.1,0\n0,0.2\n0.2,0.1\n5,5\n")
    db = str(tmp_path / "b.db")
    assert cli.main(["curator", "budget", "set", "--dataset", "f", "--epsilon", "1", "--db", db]) == 0
    base = ["query", "identify", "--csv", str(csv), "--record", "5,5", "--beta", "2", "--r", "1",
            "--dataset", "f", "--db", db, "--seed", "3"]
    assert cli.main(base + ["--epsilon", "0.6", "--sp-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "anomaly:" in out and "(0.6, 1)-sensitively private" in out and "releases   1" in out
    assert cli.main(base + ["--epsilon", "0.6"]) == 1      # a refusal (docs/curator.md)
    assert "does not fit" in capsys.readouterr().err
    no_dataset = [a for a in base if a not in ("--dataset", "f")] + ["--epsilon", "0.1"]
    try:
        rc = cli.main(no_dataset)
    except SystemExit as e:        # argparse: a required option is missing
        rc = e.code
    assert rc == 2
