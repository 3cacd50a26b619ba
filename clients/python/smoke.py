"""The Python client's smoke test against a running agent (run by services/e2e/tests/clients.rs).

Submits a task, follows its server-sent events, answers its question, approves its held action, waits for the
end, then fetches a step's screenshot. Every call goes through the client openapi-python-client generated
from the agent's /openapi.json (``ufo_agent_client``); the event stream is read through the generated
client's own authenticated httpx client (the generator has no SSE support), each message parsed into the
generated ``EventView`` / ``StreamEnd`` models.

Environment: UFO_URL (the agent's REST base URL), UFO_TOKEN (an API key), UFO_REQUEST (the task), UFO_ANSWER
(the answer to give), UFO_REASON (the approval's reason), UFO_SCREENSHOT_OUT (where to write the
screenshot). Prints one line per event and a JSON summary last; exits 1 on any failure.
"""

import json
import os
from http import HTTPStatus

from ufo_agent_client import AuthenticatedClient
from ufo_agent_client.api.human_in_the_loop import answer, confirm
from ufo_agent_client.api.tasks import get_task, list_steps, screenshot, submit_task
from ufo_agent_client.models import (
    AnswersBody,
    ConfirmationBody,
    EventView,
    ScreenshotKind,
    StreamEnd,
    SubmitTask,
    TaskView,
)
from ufo_agent_client.types import File


def env(name):
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"{name} is not set")
    return value


def ok(what, response, expected=HTTPStatus.OK):
    """The parsed body of a call that succeeded, or a failure naming the API's {code, message}."""
    if response.status_code != expected or response.parsed is None:
        raise RuntimeError(f"{what}: HTTP {int(response.status_code)} {response.content!r}")
    return response.parsed


def messages(lines):
    """The messages of an SSE stream: (event, id, data)."""
    event, ident, data = "message", "", []
    for line in lines:
        if line == "":
            if data:
                yield event, ident, "\n".join(data)
            event, ident, data = "message", "", []
            continue
        if line.startswith(":"):
            continue  # a keep-alive comment
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "id":
            ident = value
        elif field == "data":
            data.append(value)


def main():
    client = AuthenticatedClient(base_url=env("UFO_URL"), token=env("UFO_TOKEN"), timeout=None)

    submitted = ok(
        "submit",
        submit_task.sync_detailed(client=client, body=SubmitTask(request=env("UFO_REQUEST"))),
        HTTPStatus.ACCEPTED,
    )
    assert isinstance(submitted, TaskView), submitted
    task_id = submitted.id
    print(f"task {task_id} {submitted.status.value}", flush=True)

    kinds, answered, approved, end = [], 0, 0, None
    http = client.get_httpx_client()
    with http.stream("GET", f"/v1/tasks/{task_id}/events") as stream:
        if stream.status_code != 200:
            stream.read()
            raise RuntimeError(f"events: HTTP {stream.status_code} {stream.text}")
        for kind, ident, data in messages(stream.iter_lines()):
            if kind == "error":
                raise RuntimeError(f"event stream: {data}")
            if kind == "end":
                end = StreamEnd.from_dict(json.loads(data))
                break
            event = EventView.from_dict(json.loads(data))
            if str(event.seq) != ident or event.kind != kind:
                raise RuntimeError(f"message {ident}/{kind} carries event {event.seq}/{event.kind}")
            kinds.append(event.kind)
            print(f"#{event.seq} {event.kind}", flush=True)
            if event.kind == "question_asked":
                task = ok("get", get_task.sync_detailed(task_id, client=client))
                pending = task.pending_questions
                body = AnswersBody(
                    answers=[env("UFO_ANSWER")] * len(pending),
                    question_ids=[q.id for q in pending],
                )
                after = ok("answer", answer.sync_detailed(task_id, client=client, body=body))
                answered += len(pending)
                questions = " / ".join(q.question for q in pending)
                print(f"answered {questions}: {after.status.value}", flush=True)
            if event.kind == "action_held":
                task = ok("get", get_task.sync_detailed(task_id, client=client))
                held = task.held_action
                if not held:
                    raise RuntimeError(f"action_held, but the task holds nothing: {task.to_dict()}")
                body = ConfirmationBody(approve=True, action_id=held.id, reason=env("UFO_REASON"))
                after = ok("confirm", confirm.sync_detailed(task_id, client=client, body=body))
                approved += 1
                print(f"approved {held.function} on {held.target_name}: {after.status.value}", flush=True)
    if end is None:
        raise RuntimeError("the event stream closed without `end`")
    if end.status.value != "finished":
        raise RuntimeError(f"the task ended {end.status.value}: {end.result}")

    page = ok("steps", list_steps.sync_detailed(task_id, client=client))
    step = next((s for s in page.steps if "clean" in s.screenshots), None)
    if step is None:
        raise RuntimeError("no step has a clean screenshot")
    shot = screenshot.sync_detailed(task_id, step.step, client=client, kind=ScreenshotKind.CLEAN)
    image = ok("screenshot", shot)
    assert isinstance(image, File), image
    png = image.payload.read()
    content_type = shot.headers.get("content-type")
    if content_type != "image/png" or png[1:4] != b"PNG":
        raise RuntimeError(f"step {step.step}'s screenshot is not a PNG ({content_type})")
    with open(env("UFO_SCREENSHOT_OUT"), "wb") as out:
        out.write(png)

    summary = {
        "id": task_id,
        "status": end.status.value,
        "result": end.result,
        "last_seq": end.last_seq,
        "kinds": kinds,
        "answered": answered,
        "approved": approved,
        "screenshot_step": step.step,
        "screenshot_bytes": len(png),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()  # an uncaught exception prints its traceback and exits 1
