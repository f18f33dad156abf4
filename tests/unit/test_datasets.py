"""The offline UCI copies load with the row counts of the UCI data sets."""
import pytest

from dpsense.cloud.sim.datasets import DataNotInstalled, load_adult, load_ionosphere


def test_adult_row_counts_and_types():
    try:
        train, test = load_adult("train"), load_adult("test")
    except DataNotInstalled as e:
        pytest.skip(str(e))
    assert (len(train), len(test)) == (30162, 15060)
    assert {r["income"] for r in test} == {">50K", "<=50K"}
    assert isinstance(train[0]["age"], float) and isinstance(train[0]["sex"], str)
    with pytest.raises(ValueError):
        load_adult("dev")


def test_ionosphere_layout():
    try:
        x, good = load_ionosphere()
    except DataNotInstalled as e:
        pytest.skip(str(e))
    assert x.shape == (351, 34) and int(good.sum()) == 225
    assert (x[:, 1] == 0).all()
    assert load_ionosphere(uci_layout=False)[0].shape == (351, 33)
