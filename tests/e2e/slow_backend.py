"""A local backend whose provisioning takes a while (CARDPOOL_TEST_PROVISION_SECONDS), so a
test can kill the worker in the middle of it. Selected by dotted path: CARDPOOL_BACKEND."""

import os
import time

from leasing.backends.local import LocalBackend


class SlowLocalBackend(LocalBackend):
    # It blocks: not book-keeping only, so never handed over in a request (whatever the
    # setting), only by the worker this test kills.
    provisions_inline = False

    def provision(self, holding) -> dict:
        time.sleep(float(os.environ.get("CARDPOOL_TEST_PROVISION_SECONDS", "3")))
        return super().provision(holding)
