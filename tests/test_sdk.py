"""The Pulumi SDK surface the program leans on beyond its documented use, each pinned where a bump would change it
(pulumi and pulumi-kubernetes versions in requirements.txt)."""

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime.rpc import UNKNOWN

from components.gpu import hami
from ops.registrations import run


def test_a_preview_sends_an_unscheduled_value_unknown_and_plans_what_it_cannot_know():
    def program():
        node = hami._unknown_in_preview()
        k8s.core.v1.ConfigMap("preview", data={"node": node, **({} if node is None else {
            "planned": hami._known_or(node.apply(lambda _: {}), {"is": "planned"}).apply(lambda v: v["is"]),
            "known": hami._known_or(pulumi.Output.from_input({"is": "seen"}), {}).apply(lambda v: v["is"]),
        })})

    assert run({}, program=program, preview=True).named("preview").raw_inputs["data"] == {
        "node": UNKNOWN, "planned": "planned", "known": "seen"}
    assert run({}, program=program).named("preview").raw_inputs["data"] == {}
