"""Window partitions claimed through PostgreSQL (cloud/storage/claims.py): shares, takeover after a
lease, fencing of a lost claim, and the unique key that refuses a second scoring."""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from dpsense.cloud.errors import UsageError
from dpsense.cloud.storage import AnalystStore, Reading, open_analyst_store
from dpsense.cloud.storage.claims import ClaimLost, PartitionClaims
from dpsense.cloud.storage.records import WindowOutcome

pytestmark = pytest.mark.postgres
GROUPS = ("a", "b", "c", "d")        # and "default": five partitions
_DATABASES = itertools.count()


@pytest.fixture
def url(postgres_url: str) -> str:
    from tests.pgserver import create_database
    return create_database(postgres_url, "claims%d" % next(_DATABASES))


@pytest.fixture
def stores(url: str) -> Iterator[tuple[AnalystStore, AnalystStore]]:
    """Two connections to one store, as two analysts have; devices 1..4 in groups a..d, 5 readings each."""
    with open_analyst_store(url) as one, open_analyst_store(url) as two:
        for d, g in enumerate(GROUPS, 1):
            one.set_device_group(d, g, 0.0)
        one.add_batch([Reading(d, 1, s, bytes([d, s]) * 4, 1, (s, d), "dpsense/readings/d%d" % d, float(s))
                       for d in range(1, 5) for s in range(5)], [])
        yield one, two


def _outcome() -> WindowOutcome:
    return WindowOutcome(0, 0, 0, 0, 0, 0.0, 0.0, time.time())


def test_two_analysts_split_the_groups_and_never_hold_one_together(stores: tuple[AnalystStore, AnalystStore]) -> None:
    one, two = stores
    a, b = PartitionClaims(one, "analyst-1", lease=5), PartitionClaims(two, "analyst-2", lease=5)
    assert a.refresh() == {"a", "b", "c", "d", "default"}     # alone: every group
    assert b.refresh() == set()                               # all held; it now counts as alive
    assert len(a.refresh()) == 3                              # its share is ceil(5 / 2): it releases two
    assert b.refresh() == {"a", "b", "c", "d", "default"} - a.owned
    assert a.refresh() | b.refresh() == {"a", "b", "c", "d", "default"} and not a.owned & b.owned
    b.release()                                               # a clean stop hands everything back
    assert a.refresh() == {"a", "b", "c", "d", "default"}


def test_a_dead_analyst_s_groups_are_taken_after_its_lease_and_its_writes_are_refused(
        stores: tuple[AnalystStore, AnalystStore]) -> None:
    one, two = stores
    a, b = PartitionClaims(one, "analyst-1", lease=1), PartitionClaims(two, "analyst-2", lease=1)
    a.refresh()
    w = one.close_window("a", "count", upto_row=one.max_row_id(), closed_at=1.0)
    assert w is not None and w.n == 5
    assert b.refresh() == set()                               # a's lease still runs
    time.sleep(1.3)                                           # a stops renewing: "killed"
    assert b.refresh() == {"a", "b", "c", "d", "default"}
    with pytest.raises(ClaimLost, match="no longer holds"):
        one.complete_window(w.id, _outcome(), [], {"window": w.id})
    with pytest.raises(ClaimLost):
        one.close_window("b", "count", upto_row=one.max_row_id(), closed_at=1.0)
    assert one.window_record(w.id).state == "closed"          # the refused transactions left nothing
    two.complete_window(w.id, _outcome(), [], {"window": w.id})
    assert two.window_record(w.id).state == "done"


def test_a_window_is_scored_once_even_when_two_analysts_hold_its_group(stores: tuple[AnalystStore, AnalystStore],
                                                                      url: str) -> None:
    """The leases are bypassed by hand (two owners at once); the primary key of dpsense_scored still
    refuses the second scoring."""
    one, two = stores
    a, b = PartitionClaims(one, "analyst-1", lease=30), PartitionClaims(two, "analyst-2", lease=30)
    a.refresh()
    w = one.close_window("a", "count", upto_row=one.max_row_id(), closed_at=1.0)
    assert w is not None
    one.complete_window(w.id, _outcome(), [], {"window": w.id})
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE dpsense_claims SET owner = 'analyst-2' WHERE grp = 'a'")
    with pytest.raises(ClaimLost, match="scored already"):
        two.complete_window(w.id, _outcome(), [], {"window": w.id, "second": True})
    assert dict(two.window_results())[w.id] == {"window": w.id}
    assert b.owner == "analyst-2"


def test_round_ids_are_unique_across_analysts_and_follow_earlier_ones(url: str) -> None:
    with open_analyst_store(url) as one, open_analyst_store(url) as two:
        one.set_device_group(1, "a", 0.0)
        one.add_batch([Reading(1, 1, 0, b"t" * 8, 1, (0, 0), "dpsense/readings/d1", 0.0)], [])
        w = one.close_window("a", "count", upto_row=1, closed_at=0.0)
        assert w is not None
        one.start_attempt(w.id, 41)                           # a single analyst's rounds, before
        ids = [c.next_round_id() for c in (PartitionClaims(one, "analyst-1"), PartitionClaims(two, "analyst-2"))
               for _ in range(3)]
    assert len(set(ids)) == 6 and min(ids) == 42


@pytest.mark.parametrize("kwargs", [{"lease": 0.5}, {"lease": float("nan")}, {"owner": ""}])
def test_bad_claim_parameters_are_refused(url: str, kwargs: dict) -> None:
    with open_analyst_store(url) as store:
        with pytest.raises(UsageError):
            PartitionClaims(store, **{"owner": "analyst-1", **kwargs})


def test_an_sqlite_store_serves_one_analyst() -> None:
    with open_analyst_store("sqlite://") as store:
        with pytest.raises(UsageError, match="PostgreSQL"):
            PartitionClaims(store, "analyst-1")


@pytest.mark.parametrize("argv, says", [
    (["analyst", "--worker", "1"], "PostgreSQL analyst store"),
    (["analyst", "--worker", "1", "--lease", "0.5"], "--lease must be at least 1 s"),
    (["ingest", "--role", "analyst", "--retire"], "give its --worker N"),
    (["correction-server", "--worker", "1", "--correction-mode", "paper"], "PostgreSQL correction store"),
])
def test_worker_options_that_cannot_work_are_one_line_and_exit_2(tmp_path, capsys, argv: list[str], says: str) -> None:
    from dpsense.cloud.cli import main
    assert main([*argv, "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "Traceback" not in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("group", ["", "a/b", "a+", "#"])
def test_a_shared_subscription_group_is_one_plain_topic_level(group: str) -> None:
    from dpsense.cloud.ingest.service import shared_filter
    with pytest.raises(UsageError):
        shared_filter(group, "dpsense/readings/+")


def test_worker_identities() -> None:
    from dpsense.cloud.deploy.broker import worker_account
    from dpsense.cloud.ingest.service import shared_filter
    assert shared_filter(None, "dpsense/readings/+") == "dpsense/readings/+"
    assert shared_filter("analyst-ingest", "dpsense/readings/+") == "$share/analyst-ingest/dpsense/readings/+"
    assert (worker_account("analyst-ingest", None), worker_account("analyst-ingest", 3)) == (
        "analyst-ingest", "analyst-ingest-3")
    with pytest.raises(UsageError):
        worker_account("analyst", 0)


def test_partition_owners_name_each_analyst_s_groups(stores: tuple[AnalystStore, AnalystStore]) -> None:
    from dpsense.cloud.storage.claims import partition_owners
    one, two = stores
    assert partition_owners(one) is None                      # no analyst claimed anything yet
    a, b = PartitionClaims(one, "analyst-1", lease=5), PartitionClaims(two, "analyst-2", lease=5)
    a.refresh()
    b.refresh()
    assert partition_owners(one) == {"analyst-1": ["a", "b", "c", "d", "default"]}
    b.release()
    a.release()
    assert partition_owners(two) == {"(unclaimed)": ["a", "b", "c", "d", "default"]}
    with open_analyst_store("sqlite://") as lite:
        assert partition_owners(lite) is None


def test_an_analyst_whose_lease_lapses_mid_round_stores_nothing_and_the_taker_scores_the_window(url: str) -> None:
    """Analyst 1 closes the windows of every group and starts the first round; while the round is
    out its lease lapses and analyst 2 takes the groups, scores that window itself and the rest.
    Analyst 1's completion is refused (fencing): every window is scored once, all by analyst 2."""
    import numpy as np

    from dpsense.cloud.analyst.windows import WindowSpec
    from tests.cloud.test_stream_analyst import Clock, Fleet, InProcessServer, make_analyst

    fleet = Fleet()
    with open_analyst_store(url) as one, open_analyst_store(url) as two:
        for d, g in enumerate(GROUPS, 1):
            one.set_device_group(d, g, 0.0)
            one.add_batch(fleet.readings(d, np.linspace(0, 10, 30, endpoint=False)), [])
        clock = Clock(20.0)
        first = InProcessServer(fleet.d_diff)
        second = InProcessServer(fleet.d_diff)
        a1, logs1 = make_analyst(one, first, clock, WindowSpec(count=30))
        a2, _ = make_analyst(two, second, clock, WindowSpec(count=30))
        a1._claims = PartitionClaims(one, "analyst-1", lease=1)
        a2._claims = PartitionClaims(two, "analyst-2", lease=1)
        a1._keep_leases = lambda: None          # type: ignore[method-assign]  # a stalled round: no renewal
        publish = first.publish
        taken_over: list[int] = []

        def slow_round(topic: str, payload: bytes, qos: int = 0) -> None:
            if not taken_over:
                time.sleep(1.3)                 # analyst 1's lease ends while its round is out
                taken_over.append(a2.poll(two))
            publish(topic, payload, qos)
        first.publish = slow_round              # type: ignore[method-assign]

        assert a1.poll(one) == 0                # closed all four windows; its first round was refused
        assert taken_over == [1]                # analyst 2 took the groups and scored that window
        assert any("no longer holds the partition of group a" in line for line in logs1)
        while sum(a2.poll(two) for _ in range(4)):
            pass
        windows = two.windows()
        results = dict(two.window_results())
        scored = two._rows("read", "SELECT window_id, owner FROM dpsense_scored ORDER BY window_id")
    assert [w.state for w in windows] == ["done"] * 4 and {w.group for w in windows} == set(GROUPS)
    assert scored == [(w.id, "analyst-2") for w in windows]
    assert sorted(results) == [w.id for w in windows]
    assert len({r["round"] for r in results.values()}) == 4      # round ids from one sequence, none reused
