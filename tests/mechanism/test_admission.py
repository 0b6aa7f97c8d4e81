"""Admission before a round: stages in order, each seeing only the jobs the ones before let
through; the after stage holds a job until what it names completed and fails it when that
cannot happen."""

import numpy as np

from apportion.core.dependencies import Dependencies
from apportion.mechanism.admission import (Admission, AdmissionContext, AfterStage, Applicants, ArrayLimitStage,
                                           Outcome, Verdict)

# jobs 10 to 15 as the clock knows them: what became of each
OUTCOMES = {10: Outcome.COMPLETED, 11: Outcome.WAITING, 12: Outcome.FAILED, 13: Outcome.CANCELLED,
            14: Outcome.UNSCHEDULABLE, 15: Outcome.WAITING}
CONTEXT = AdmissionContext(now_s=0.0, outcome=lambda keys: np.array([OUTCOMES[int(k)] for k in keys]),
                           label=lambda key: f"job {key}")


class HoldOddKeys:
    """A stage for the example: holds the jobs whose key is odd, and notes whom it was shown."""

    name = "odd"

    def __init__(self) -> None:
        self.shown: list[list[int]] = []

    def admit(self, jobs: Applicants, context: AdmissionContext) -> Verdict:
        self.shown.append(jobs.key.tolist())
        hold = jobs.key % 2 == 1
        return Verdict(hold, np.zeros(len(jobs), dtype=bool), {int(i): "odd" for i in np.flatnonzero(hold)})


class FailAbove:
    """Fails every job whose key is above a bound, and notes whom it was shown."""

    name = "above"

    def __init__(self, bound: int) -> None:
        self.bound, self.shown = bound, []

    def admit(self, jobs: Applicants, context: AdmissionContext) -> Verdict:
        self.shown.append(jobs.key.tolist())
        fail = jobs.key > self.bound
        reasons = {int(i): f"above {self.bound}" for i in np.flatnonzero(fail)}
        return Verdict(np.zeros(len(jobs), dtype=bool), fail, reasons)


def test_a_job_held_by_the_first_stage_is_not_shown_to_the_second():
    odd, above = HoldOddKeys(), FailAbove(3)
    verdict = Admission([odd, above]).admit(Applicants(np.array([1, 2, 3, 4, 6])), CONTEXT)

    assert odd.shown == [[1, 2, 3, 4, 6]]
    assert above.shown == [[2, 4, 6]]
    assert verdict.hold.tolist() == [True, False, True, False, False]
    assert verdict.fail.tolist() == [False, False, False, True, True]
    assert verdict.admitted.tolist() == [False, True, False, False, False]
    assert verdict.reasons == {0: "odd", 2: "odd", 3: "above 3", 4: "above 3"}


def test_no_stage_admits_everyone():
    verdict = Admission([]).admit(Applicants(np.array([5, 6])), CONTEXT)

    assert verdict.admitted.tolist() == [True, True] and verdict.reasons == {}


def test_the_after_stage_holds_until_every_named_job_completed_and_fails_when_one_cannot():
    after = Dependencies.of_lists([[], [10], [10, 11], [11, 15], [12], [11, 13], [14]])
    verdict = AfterStage().admit(Applicants(np.arange(7), after), CONTEXT)

    assert verdict.admitted.tolist() == [True, True, False, False, False, False, False]
    assert verdict.hold.tolist() == [False, False, True, True, False, False, False]
    assert verdict.reasons == {
        2: "waiting for job 11 to complete",
        3: "waiting for job 11 to complete (and 1 more)",
        4: "job 12, which it runs after, failed",
        5: "job 13, which it runs after, was cancelled",  # one that ended badly fails it, whatever else waits
        6: "job 14, which it runs after, cannot be scheduled",
    }


def test_a_job_the_after_stage_holds_is_not_shown_to_a_later_stage():
    above = FailAbove(0)
    after = Dependencies.of_lists([[11], [], [10]])
    verdict = Admission([AfterStage(), above]).admit(Applicants(np.array([1, 2, 3]), after), CONTEXT)

    assert above.shown == [[2, 3]]
    assert verdict.hold.tolist() == [True, False, False]
    assert verdict.fail.tolist() == [False, True, True]


def test_the_array_limit_stage_lets_in_as_many_tasks_as_each_array_has_room_for_first_come_first():
    # jobs 20-25: 20, 22, 24 of array 7 (room for 2 of its limit 3), 21 and 23 of array 9 (room for none
    # of its limit 1), 25 in no limited array
    jobs = Applicants(np.array([20, 21, 22, 23, 24, 25]), None, array=np.array([7, 9, 7, 9, 7, -1]),
                      array_room=np.array([2, 0, 2, 0, 2, 0]), array_most=np.array([3, 1, 3, 1, 3, 0]))

    verdict = ArrayLimitStage().admit(jobs, CONTEXT)

    assert verdict.admitted.tolist() == [True, False, True, False, False, True]
    assert not verdict.fail.any()
    assert verdict.reasons == {1: "waiting: array 9 runs at most 1 task at once",
                               3: "waiting: array 9 runs at most 1 task at once",
                               4: "waiting: array 7 runs at most 3 tasks at once"}


def test_the_array_limit_stage_sees_only_what_the_after_stage_let_through():
    jobs = Applicants(np.array([30, 31]), Dependencies.of_lists([[11], []]), array=np.array([7, 7]),
                      array_room=np.array([1, 1]), array_most=np.array([1, 1]))

    verdict = Admission([AfterStage(), ArrayLimitStage()]).admit(jobs, CONTEXT)

    assert verdict.admitted.tolist() == [False, True]  # 30 waits for job 11, so 31 takes the room


def test_a_failure_cascades_down_a_chain_of_dependencies_in_one_call():
    # 21 fails (its key is above 20); 22 runs after 21 and 23 after 22: both fail with it, now
    from apportion.mechanism.admission import admit_settled

    keys = np.array([21, 22, 23, 24])
    after = Dependencies.of_lists([[], [21], [22], []])
    failed: set[int] = set()
    context = AdmissionContext(0.0, lambda ks: np.array([Outcome.FAILED if int(k) in failed else Outcome.WAITING
                                                         for k in ks]), lambda key: f"job {key}")
    admission = Admission([AfterStage(), FailAbove(20)])
    asked = []

    def ask(positions):
        asked.append(keys[positions].tolist())
        return admission.admit(Applicants(keys[positions], after.subset(positions)), context)

    def failed_now(positions, verdict):
        failed.update(keys[positions].tolist())
        return True

    verdict = admit_settled(len(keys), ask, failed_now)
    assert verdict.fail.tolist() == [True, True, True, True]
    assert verdict.reasons[1] == "job 21, which it runs after, failed"
    assert verdict.reasons[2] == "job 22, which it runs after, failed"
    assert asked == [[21, 22, 23, 24], [22, 23], [23]]  # each time the jobs still held, asked again


def test_a_clock_that_asks_everyone_again_gets_one_answer_per_job_from_the_last_ask():
    from apportion.mechanism.admission import admit_settled

    answers = iter([Verdict(np.array([False, True]), np.array([True, False]), {0: "first fails", 1: "held"}),
                    Verdict(np.array([False, False]), np.array([True, True]), {0: "still", 1: "now fails"})])
    verdict = admit_settled(2, lambda positions: next(answers), lambda positions, v: positions.tolist() == [0],
                            again_all=True)
    assert verdict.fail.tolist() == [True, True] and verdict.reasons == {0: "still", 1: "now fails"}
