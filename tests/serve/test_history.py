"""The dashboard's memory of the cluster and of each job over time (apportion/serve/views/history.py),
the cluster's kept in the state file across restarts."""

from apportion.serve.views.history import History
from apportion.serve.base.space import NoSpace
from apportion.serve.store.state import StateStore


def test_samples_come_back_as_columns_with_a_busy_column_per_type():
    history = History()
    history.sample(10.0, queued=3, running=1, busy={"v100": 1})
    history.sample(12.0, queued=2, running=2, busy={"v100": 1, "cpu": 1})

    assert history.cluster(("v100", "cpu")) == {"t": [10.0, 12.0], "queued": [3, 2], "running": [1, 2],
                                 "busy": {"v100": [1, 1], "cpu": [0, 1]}}


def test_a_full_series_keeps_every_other_sample_and_the_last_over_its_whole_span():
    history = History(keep=10)
    for t in range(11):
        history.sample(float(t), queued=t, running=0, busy={})

    assert history.cluster(("cpu",))["t"] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert history.cluster(("cpu",), points=3)["t"] == [0.0, 4.0, 10.0]


def test_a_jobs_rate_is_the_one_it_reported_else_its_steps_over_the_time_between_reports():
    history = History()
    history.report(7, 100.0, 0, None)
    history.report(7, 110.0, 50, None)  # 50 steps in 10 s
    history.report(7, 120.0, 90, 3.5)  # it says 3.5 steps/s: taken as said
    history.report(7, 130.0, 40, None)  # resumed from an older checkpoint: no rate

    assert history.job(7) == {"t": [100.0, 110.0, 120.0, 130.0], "steps_done": [0, 50, 90, 40],
                              "steps_per_s": [None, 5.0, 3.5, None]}
    assert history.job(8) == {"t": [], "steps_done": [], "steps_per_s": []}


def test_only_the_most_recent_jobs_reports_are_kept():
    history = History(jobs_kept=2)
    for job in (1, 2, 3):
        history.report(job, 1.0, 5, 1.0)

    assert history.job(1)["t"] == [] and history.job(2)["t"] == [1.0] and history.job(3)["t"] == [1.0]


def test_samples_kept_in_the_state_file_come_back_after_a_restart_with_a_break_where_no_server_ran(tmp_path):
    store = StateStore(tmp_path / "state.db")
    before = History(store=store)
    for t in (0.0, 5.0, 10.0):
        before.sample(t, queued=2, running=1, busy={"v100": 1})
    store.close()

    store = StateStore(tmp_path / "state.db")  # the next server, an hour later
    after = History(store=store)
    after.sample(3600.0, queued=0, running=0, busy={})
    after.sample(3605.0, queued=1, running=0, busy={})

    assert after.cluster(("v100",)) == {
        "t": [0.0, 5.0, 10.0, 1805.0, 3600.0, 3605.0],
        "queued": [2, 2, 2, None, 0, 1], "running": [1, 1, 1, None, 0, 0],
        "busy": {"v100": [1, 1, 1, None, 0, 0]},
    }


def test_the_state_file_drops_the_same_samples_as_memory(tmp_path):
    store = StateStore(tmp_path / "state.db")
    history = History(keep=10, store=store)
    for t in range(11):
        history.sample(float(t), queued=t, running=0, busy={"cpu": t % 2})

    assert [s[0] for s in store.samples()] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert store.samples()[-1] == (10.0, 10, 0, {"cpu": 0})
    assert History(keep=4, store=store).cluster(("cpu",))["t"] == [0.0, 4.0, 8.0, 10.0]  # a smaller limit: halved on load


def test_a_full_state_directory_keeps_the_sample_in_memory(tmp_path):
    class Full:
        def samples(self):
            return []

        def put_sample(self, *point, keep=None):
            raise NoSpace(tmp_path, "sample")

    history = History(store=Full())
    history.sample(1.0, queued=1, running=0, busy={})

    assert history.cluster(())["t"] == [1.0]


def test_a_series_halved_or_sampled_faster_after_a_restart_breaks_only_where_no_server_ran(tmp_path):
    history = History(store=StateStore(tmp_path / "state.db"))
    for t in (0.0, 20.0, 40.0, 50.0, 60.0, 65.0, 70.0):  # halved twice, then once: 20 s, 10 s, then 5 s apart
        history.sample(t, queued=1, running=0, busy={})
    for t in (900.0, 900.5, 901.0):  # the next server samples every half second
        history.sample(t, queued=1, running=0, busy={})

    assert history.cluster(())["t"] == [0.0, 20.0, 40.0, 50.0, 60.0, 65.0, 70.0, 485.0, 900.0, 900.5, 901.0]
    assert history.cluster(())["queued"][7] is None
