"""`--dist loadgroup` (what `make test` runs) keeps an ``xdist_group`` on one worker: the scheduler groups
by the ``@group`` suffix of each test's node id, which conftest's ``_apply_xdist_groups`` puts where pytest
reads it. Without it every group is split and each module's shared server starts once per worker."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("xdist_guard")


def test_a_grouped_test_carries_its_group_in_its_node_id(
    request: pytest.FixtureRequest, pytestconfig: pytest.Config
) -> None:
    if not getattr(pytestconfig.option, "loadgroup", False):
        pytest.skip("runs under --dist loadgroup, as make test runs the suite")
    assert request.node.nodeid.endswith("@xdist_guard")
