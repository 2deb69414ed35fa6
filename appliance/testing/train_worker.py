"""A stand-in trainer worker a test launches: `python -m appliance.testing.train_worker JOB`.

Not imported by `appliance.testing` (running a module that its package already imported makes runpy warn).
"""

from __future__ import annotations

import os
import sys

from appliance.training import trainer, worker


def failing_train_worker(argv: list[str]) -> None:
    """The real trainer worker, except that rank $APPLIANCE_TEST_FAIL_RANK (default 1) raises at its first GRPO
    step: after the model loaded, while the other ranks wait for it in the gradient all-reduce; with
    $APPLIANCE_TEST_STEP_S each GRPO step takes that many seconds more (a test's time to steer between them)."""
    fail_rank = int(os.environ.get("APPLIANCE_TEST_FAIL_RANK", "1"))
    slow = float(os.environ.get("APPLIANCE_TEST_STEP_S", "0"))
    if slow:
        import time

        step = trainer.PolicyTrainer.grpo_step

        def slow_step(self, batch):
            time.sleep(slow)
            return step(self, batch)

        trainer.PolicyTrainer.grpo_step = slow_step  # type: ignore[method-assign]
    if int(os.environ.get("RANK", "0")) == fail_rank:
        def fail(self, batch):
            raise RuntimeError(f"injected failure of training worker rank {fail_rank} (appliance.testing)")

        trainer.PolicyTrainer.grpo_step = fail  # type: ignore[method-assign]
    worker.main(argv)


if __name__ == "__main__":
    failing_train_worker(sys.argv[1:])
