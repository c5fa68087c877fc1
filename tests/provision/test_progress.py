"""The provision view's tally of ansible-runner events."""

from glm5svc.provision.runner import Progress


def event(kind, host, task, **data):
    return {"event": kind, "event_data": {"host": host, "task": task, **data}}


def test_counts_changed_and_failed_per_host_and_keeps_messages():
    progress = Progress()
    progress.handle({"event": "playbook_on_play_start", "event_data": {"play": "container"}})
    progress.handle(event("runner_on_start", "ct", "Install glm5svc"))
    progress.handle(event("runner_on_ok", "ct", "Install glm5svc", res={"changed": True}))
    progress.handle(event("runner_on_ok", "ct", "Read", res={"changed": False}))
    progress.handle(
        event(
            "runner_on_ok",
            "ct",
            "Show glm5svc status",
            res={"msg": ["a", "b"]},
            task_action="ansible.builtin.debug",
        )
    )
    progress.handle(event("runner_on_failed", "host", "Pin", res={"msg": "boom"}))
    progress.handle(
        event("runner_on_failed", "host", "Probe", res={"msg": "x"}, ignore_errors=True)
    )
    ct, host = progress.hosts["ct"], progress.hosts["host"]
    assert (ct.ok, ct.changed, ct.failed) == (3, 1, 0)
    assert ct.changed_tasks == ["Install glm5svc"]
    assert ct.messages["Show glm5svc status"] == "a\nb"
    assert (host.failed, host.messages["Pin"]) == (1, "boom")
    assert progress.play == "container"
