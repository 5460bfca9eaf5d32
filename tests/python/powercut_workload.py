"""Work of the official azure-servicebus SDK for the power-cut test (tests/broker/powercut.rs).

    python powercut_workload.py load  AMQP_PORT ADMIN_PORT CA FACTS ROUND
    python powercut_workload.py check AMQP_PORT ADMIN_PORT CA FACTS ROUND

`load` sends to a partitioned queue, schedules messages a day ahead and cancels some, sets a
session's state and creates and deletes queues at run time, one operation at a time, until the
broker goes away. Before each operation it appends what it tries to FACTS (JSON lines, on a disk
that keeps them) and after the broker acknowledged it what was done, so that after the crash
and the power cut `check` knows what must have survived (done), what may have (tried and
unanswered), and what must not come back (a cancel or delete that was done). `check` also
schedules one more message to see that sequence numbers go on above every one handed out.
Exits 0 when the load stops because the broker went away, or when every check holds.
"""

import json
import sys
from datetime import datetime, timedelta, timezone

from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient

POLICY = "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
PARTITIONED, SCHEDULED, SESSIONS, SESSION = "part", "sched", "sess", "s"
# How far ahead a message is scheduled: it never comes due during the test.
AHEAD = timedelta(days=1)
TRY_TIMEOUT_S = 10


def clients(amqp_port, admin_port, ca):
    amqp = ServiceBusClient.from_connection_string(
        f"Endpoint=sb://127.0.0.1:{amqp_port};{POLICY};UseDevelopmentEmulator=true;",
        retry_total=0,
        try_timeout=TRY_TIMEOUT_S,
    )
    admin = ServiceBusAdministrationClient.from_connection_string(
        f"Endpoint=sb://localhost:{admin_port}/;{POLICY}", connection_verify=ca, retry_total=0
    )
    return amqp, admin


def load(amqp, admin, facts, round_):
    def record(**fact):
        facts.write(json.dumps(fact) + "\n")
        facts.flush()

    with amqp, admin:
        partitioned = amqp.get_queue_sender(PARTITIONED)
        scheduled = amqp.get_queue_sender(SCHEDULED)
        session = amqp.get_queue_receiver(SESSIONS, session_id=SESSION)
        numbers = []
        step = 0
        try:
            while True:
                tag = f"{round_}-{step}"
                record(op="send", done=False, id=tag)
                message = ServiceBusMessage(tag, message_id=tag, partition_key=f"k{step % 7}")
                partitioned.send_messages(message, timeout=TRY_TIMEOUT_S)
                record(op="send", done=True, id=tag)

                record(op="schedule", done=False, id=tag)
                due = datetime.now(timezone.utc) + AHEAD
                message = ServiceBusMessage(tag, message_id=tag)
                [number] = scheduled.schedule_messages(message, due, timeout=TRY_TIMEOUT_S)
                numbers.append(number)
                record(op="schedule", done=True, id=tag, seq=number)
                if step % 3 == 2:
                    cancelled = numbers[-2]
                    record(op="cancel", done=False, seq=cancelled)
                    scheduled.cancel_scheduled_messages(cancelled, timeout=TRY_TIMEOUT_S)
                    record(op="cancel", done=True, seq=cancelled)

                record(op="state", done=False, value=tag)
                session.session.set_state(tag.encode(), timeout=TRY_TIMEOUT_S)
                record(op="state", done=True, value=tag)

                if step % 4 == 0:
                    name = f"rt-{tag}"
                    record(op="create", done=False, name=name)
                    admin.create_queue(name)
                    record(op="create", done=True, name=name)
                if step % 8 == 4:
                    name = f"rt-{round_}-{step - 4}"
                    record(op="delete", done=False, name=name)
                    admin.delete_queue(name)
                    record(op="delete", done=True, name=name)
                step += 1
        except Exception as error:  # the broker went away: what was tried and not done is open
            print(f"load of round {round_} stopped after {step} steps: {type(error).__name__}")


def peek_all(receiver):
    """Every message of the receiver's queue (scheduled ones included), by sequence number."""
    found, start = {}, 0
    while True:
        batch = receiver.peek_messages(
            max_message_count=250, sequence_number=start, timeout=TRY_TIMEOUT_S
        )
        if not batch:
            return found
        for message in batch:
            assert message.sequence_number not in found, f"{message.sequence_number} twice"
            found[message.sequence_number] = str(message.message_id)
        start = batch[-1].sequence_number + 1


def check(amqp, admin, facts_path, round_):
    facts = [json.loads(line) for line in open(facts_path, encoding="utf-8")]
    done = lambda op: [f for f in facts if f["op"] == op and f["done"]]
    tried = lambda op: [f for f in facts if f["op"] == op and not f["done"]]
    problems = []
    with amqp, admin:
        with amqp.get_queue_receiver(PARTITIONED) as receiver:
            sent = list(peek_all(receiver).values())
        lost = {f["id"] for f in done("send")} - set(sent)
        strays = set(sent) - {f["id"] for f in tried("send")}
        twice = {id_ for id_ in sent if sent.count(id_) > 1}
        problems += [f"acknowledged sends lost: {sorted(lost)}"] * bool(lost)
        problems += [f"sends never tried: {sorted(strays)}, twice: {sorted(twice)}"] * bool(
            strays or twice
        )

        with amqp.get_queue_receiver(SCHEDULED) as receiver:
            held = peek_all(receiver)
        cancel_tried = {f["seq"] for f in tried("cancel")}
        cancelled = {f["seq"] for f in done("cancel")}
        for fact in done("schedule"):
            if fact["seq"] not in cancel_tried and held.get(fact["seq"]) != fact["id"]:
                problems.append(f"acknowledged schedule lost: {fact}")
        back = cancelled & set(held)
        problems += [f"confirmed cancels came back: {sorted(back)}"] * bool(back)
        handed_out = [f["seq"] for f in done("schedule")] + list(held)
        with amqp.get_queue_sender(SCHEDULED) as sender:
            tag = f"check-{round_}"
            due = datetime.now(timezone.utc) + AHEAD
            [number] = sender.schedule_messages(
                ServiceBusMessage(tag, message_id=tag), due, timeout=TRY_TIMEOUT_S
            )
        if handed_out and number <= max(handed_out):
            problems.append(f"sequence number {number} reused (had {max(handed_out)})")
        with open(facts_path, "a", encoding="utf-8") as file:
            for done_ in (False, True):
                file.write(json.dumps(dict(op="schedule", done=done_, id=tag, seq=number)) + "\n")

        with amqp.get_queue_receiver(SESSIONS, session_id=SESSION) as receiver:
            state = receiver.session.get_state(timeout=TRY_TIMEOUT_S)
        state = state.decode() if state else None
        # The last acknowledged state, or one tried after it and left unanswered.
        states = [f for f in facts if f["op"] == "state"]
        last = max((i for i, f in enumerate(states) if f["done"]), default=None)
        if last is None:
            allowed = {None} | {f["value"] for f in states}
        else:
            allowed = {f["value"] for f in states[last:]}
        if state not in allowed:
            problems.append(f"session state {state!r}, not one of {sorted(map(str, allowed))}")

        names = {queue.name for queue in admin.list_queues()}
        delete_tried = {f["name"] for f in tried("delete")}
        for fact in done("create"):
            if fact["name"] not in delete_tried and fact["name"] not in names:
                problems.append(f"a queue created at run time is gone: {fact['name']}")
        for fact in done("delete"):
            if fact["name"] in names:
                problems.append(f"a deleted queue came back: {fact['name']}")
        try:
            admin.get_queue(PARTITIONED)
        except ResourceNotFoundError:
            problems.append("the declared queue is gone")

    print(
        f"check of round {round_}: {len(done('send'))} sends, {len(done('schedule'))} schedules, "
        f"{len(cancelled)} cancels, {len(done('state'))} states, {len(done('create'))} queues "
        f"created and {len(done('delete'))} deleted, all acknowledged; state now {state!r}"
    )
    for problem in problems:
        print(f"PROBLEM: {problem}")
    return not problems


def main():
    command, amqp_port, admin_port, ca, facts, round_ = sys.argv[1:]
    amqp, admin = clients(amqp_port, admin_port, ca)
    if command == "load":
        with open(facts, "a", encoding="utf-8") as file:
            load(amqp, admin, file, int(round_))
        return 0
    return 0 if check(amqp, admin, facts, int(round_)) else 1


if __name__ == "__main__":
    sys.exit(main())
