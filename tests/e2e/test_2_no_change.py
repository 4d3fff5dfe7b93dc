"""A second `up` with nothing changed changes nothing: the engine's summary counts every resource the first `up`
created as `same` and nothing as a change, no step touches a resource, and the outputs stay as they were."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_a_second_up_changes_nothing(lab):
    again = lab.up()
    assert again.changes == {} and again.counts["same"] == lab.first.counts["create"], again.render()
    assert again.ops == {}, again.render()
    assert again.plain_outputs == lab.first.plain_outputs
