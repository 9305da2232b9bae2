"""``--from dify --version NAME``: a Dify app's rated conversations, through its service API.

The version spec (``kind = "dify"``) gives the base URL and the environment variable holding the
app key, as ``eval`` uses them. Dify's service API has no "list every message" route: it lists
feedbacks, and reads a conversation's messages only as the end user who had it. So:

1. ``GET /app/feedbacks`` (paged by ``page``/``limit``, newest first; a short page is the last) —
   every rating, with ``message_id``, ``conversation_id``, ``rating``, ``content`` (the comment),
   ``from_source`` and ``from_end_user_id``;
2. ``GET /end-users/{from_end_user_id}`` — the end user's ``type`` and ``session_id`` (the ``user``
   string the app sent), once per end user and pull (never kept: it names the user);
3. ``GET /messages?conversation_id&user`` (newest first, older pages by ``first_id`` while
   ``has_more``) — question, answer and ``retriever_resources`` of every message in each rated
   conversation: all of it, or down to the message the cursor says an earlier pull stored it whole
   up to (a pull killed mid-write leaves any subset, so an unmarked conversation is read whole).

What it cannot read is counted by reason, per feedback: WebApp users' conversations (Dify scopes
conversations to their end user, and a web-page user is not a service API user), deleted
conversations, end users Dify no longer knows, and ratings given by an admin in the console. And
what it reads is only the rated conversations (coverage ``rated_conversations``): a rate over them
is not the app's rate. Dify's MLflow tracing (``--from mlflow``) sees the whole traffic.

:class:`DifyFeedbacks` is also how ``--from mlflow`` joins these ratings to Dify's traces.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ragtrack.agents.base import read_secret
from ragtrack.agents.dify import dify_check, resource_contexts
from ragtrack.agents.endpoint import Endpoint, EndpointError, bearer_endpoint
from ragtrack.errors import RagtrackError
from ragtrack.llm.accounting import Usage
from ragtrack.llm.client import RetryPolicy
from ragtrack.production import fields
from ragtrack.production.fields import FieldError
from ragtrack.production.sources import Batch, Pages, PulledMessage, SourceRequest, UserFeedback, expect
from ragtrack.spec import LoadedSpec, load_spec

PAGE = 100  # messages per /messages page (Dify's most)
FEEDBACK_PAGE = 100  # feedbacks per /app/feedbacks page (Dify allows 101)
WEBAPP = "feedbacks of WebApp users: Dify's service API does not list their conversations"
DELETED = "feedbacks on deleted conversations (Dify answers 404 Conversation Not Exists)"
UNKNOWN_USER = "feedbacks whose end user Dify no longer knows"
ADMIN = "ratings an admin gave in the Dify console (not an end user's): not used"
MISSING = "feedbacks on messages no longer in their conversation"


def load_platform_spec(request: SourceRequest, kind: str) -> LoadedSpec:
    """The version spec ``--version`` names, which must be of ``kind``."""
    if not request.version:
        raise RagtrackError(f"--from {kind} needs --version NAME: the version spec of the app (pipelines/NAME.toml)")
    config = request.config
    spec = load_spec(request.version, config.path(config.project.pipelines), config.root)
    if spec.kind != kind:
        raise RagtrackError(f'--version {request.version}: {spec.path} is kind = "{spec.kind}", not "{kind}"')
    return spec


#: How a pull's requests are retried: an eval's policy (six attempts, 15-31 s of backoff), a server's
#: ``Retry-After`` honoured up to its ``max_delay_s`` (30 s) and said so beyond. The hostile-server
#: tests shorten it.
PULL_RETRY = RetryPolicy()


def spec_endpoint(spec: LoadedSpec, request: SourceRequest, check) -> Endpoint:
    """The spec's base URL with its key, retried and throttled as an eval's calls are; a whole reply
    must come within the spec's ``timeout_s`` (not only each read of it)."""
    table = spec.spec.agent
    key = read_secret(spec, table.api_key_env)
    timeout = table.timeout_s or request.config.eval.timeout_s
    return bearer_endpoint(
        table.base_url,
        key,
        timeout_s=timeout,
        max_concurrency=table.max_concurrency,
        min_concurrency=table.concurrency_floor,
        check=check,
        retry=PULL_RETRY,
        deadline_s=timeout,
    )


class DifyFeedbacks:
    """An app's feedbacks, its end users and its conversations' messages, over the service API."""

    def __init__(self, endpoint: Endpoint, label: str):
        self.endpoint, self.label, self.usage = endpoint, label, Usage()

    def get(self, path: str, params: dict | None = None) -> Any:
        try:
            return self.endpoint.request("GET", path, params=params, usage=self.usage, step="logs")
        except EndpointError as e:
            if e.status in (401, 403):
                raise RagtrackError(f"Dify at {self.endpoint.base_url}: {e} (is the key the app's API key?)") from None
            raise

    def feedbacks(self, progress: Callable[[str], None]) -> list[dict]:
        """Every feedback of the app (end users' and admins'), newest first: the whole listing in the
        shape Dify's API reference gives, or an error (a rating is withdrawn only by a well-formed
        listing that leaves its message out, never by a junk reply)."""
        out: list[dict] = []
        where = f"Dify at {self.endpoint.base_url}: /app/feedbacks"
        pages = Pages(where)
        while True:
            page = pages.pages + 1
            try:
                reply = self.get("/app/feedbacks", {"page": page, "limit": FEEDBACK_PAGE})
            except EndpointError as e:
                raise RagtrackError(f"{where}: {e}") from None
            at = f"{where} page {page}"
            data = expect(expect(reply, dict, at, "the reply").get("data"), list, at, "data")
            items = [_feedback(f, f"{at}: data[{n}]") for n, f in enumerate(data)]
            fresh = pages.new([_key(f) for f in items])
            out += [f for f in items if _key(f) in fresh]
            progress(f"{self.label}: {len(out)} feedbacks read")
            if len(items) < FEEDBACK_PAGE:  # the reply has no has_more: a short page is the last
                return out

    def app_name(self) -> str | None:
        """The app's name (``GET /info``), which Dify's traces carry as ``app_name``; None if not told."""
        try:
            info = self.get("/info")
        except EndpointError:
            return None
        return str(info["name"]) if isinstance(info, dict) and isinstance(info.get("name"), str) else None

    def end_user(self, end_user_id: str) -> dict | None:
        """The end user (``type``, ``session_id``), or None when Dify does not know them (404). The ID is
        one encoded path segment (a feedback's ``from_end_user_id`` is the platform's word, not ours)."""
        path = f"/end-users/{fields.path_segment(end_user_id)}"
        where = f"Dify at {self.endpoint.base_url}: {path}"
        try:
            reply = self.get(path)
        except EndpointError as e:
            if e.status == 404:
                return None
            raise RagtrackError(f"{where}: {e}") from None
        expect(reply, dict, where, "the reply")
        for key in ("type", "session_id"):
            expect(reply.get(key), str, where, key)
        return reply

    def messages(self, conversation_id: str, user: str, complete_through: str | None = None) -> list[dict] | None:
        """The conversation's messages, oldest first: all of them, or down to (not including)
        ``complete_through``, the newest message an earlier pull stored the conversation whole up to;
        None when Dify says the conversation does not exist (deleted) for this user.

        Read whole unless the store is known to hold a complete prefix: a pull killed while it wrote
        a conversation may have left any subset of it, and paging down to the newest stored message
        kept 595 of 600 for good."""
        newest_first: list[dict] = []
        params: dict[str, Any] = {"conversation_id": conversation_id, "user": user, "limit": PAGE}
        where = f"Dify at {self.endpoint.base_url}: /messages"
        pages = Pages(f"{where} of conversation {conversation_id}")
        while True:
            try:
                reply = self.get("/messages", params)
            except EndpointError as e:
                if e.status == 404 and "conversation" in str(e).lower():
                    return None
                raise RagtrackError(f"{where}: {e}") from None
            at = f"{where} (conversation {conversation_id}, page {pages.pages + 1})"
            expect(reply, dict, at, "the reply")
            data = expect(reply.get("data"), list, at, "data")
            more = expect(reply.get("has_more"), bool, at, "has_more")
            page = [_message_shape(m, f"{at}: data[{n}]") for n, m in enumerate(data)]
            fresh = pages.new([m["id"] for m in page])
            for m in reversed(page):  # a page is oldest first; walk it newest first
                if m["id"] == complete_through:
                    return newest_first[::-1]
                if m["id"] in fresh:
                    newest_first.append(m)
            if not page or not more:
                return newest_first[::-1]
            params["first_id"] = page[0]["id"]


def _feedback(f: Any, where: str) -> dict:
    """One ``/app/feedbacks`` record: an object, or the reply is not Dify's. Its values are read by the
    caller through :mod:`ragtrack.production.fields`: one that is no value skips that record, counted by
    field, and the pull goes on (a record is not the reply)."""
    return expect(f, dict, where, "the record")


def _key(f: dict) -> str:
    """A feedback record's identity for the listing's repeat check: its ID, or (a record without one, to
    be skipped when read) its whole content."""
    return f["id"] if isinstance(f.get("id"), str) else json.dumps(f, sort_keys=True, default=str)


def _message_shape(m: Any, where: str) -> dict:
    """One ``/messages`` record: an object with a string ``id`` (what the listing pages by) and a
    ``retriever_resources`` list (or none), or the reply is not Dify's; its other values are read by the
    caller, as a feedback's are."""
    expect(m, dict, where, "the record")
    expect(m.get("id"), str, where, "id")
    expect(m.get("retriever_resources"), (list, type(None)), where, "retriever_resources")
    return m


@dataclass(frozen=True)
class Rated:
    """An end user's feedback of ``/app/feedbacks``, every field checked."""

    message_id: str
    conversation_id: str
    end_user: str  # Dify's end-user ID (``from_end_user_id``)
    feedback: UserFeedback | None  # None: the feedback holds no rating (withdrawn)


def read_feedbacks(feedbacks: list[dict]) -> tuple[list[Rated], Counter[str], bool]:
    """The end users' feedbacks, checked field by field; those not read counted by reason: admins'
    (:data:`ADMIN`) and malformed ones, by field (a ``rating`` of ``5`` is no like or dislike). Last,
    whether every record was read: a listing with a malformed one withdraws no rating."""
    out: list[Rated] = []
    skipped: Counter[str] = Counter()
    complete = True
    for f in feedbacks:
        if f.get("from_source") != "user":
            skipped[ADMIN] += 1
            continue
        try:
            rating = fields.field(f, "rating", fields.rating)
            comment = fields.field(f, "content", fields.text)[0] or None
            rated = Rated(
                fields.field(f, "message_id", fields.identifier),
                fields.field(f, "conversation_id", fields.identifier),
                fields.field(f, "from_end_user_id", fields.identifier),
                UserFeedback(rating, comment, _rated_at(f)) if rating else None,
            )
        except FieldError as e:
            skipped[e.skip("feedbacks")] += 1
            complete = False
            continue
        out.append(rated)
    return out, skipped, complete


def ratings_of(rated: list[Rated]) -> dict[str, UserFeedback]:
    """Message ID → the end user's rating and comment."""
    return {r.message_id: r.feedback for r in rated if r.feedback is not None}


def _rated_at(f: dict) -> str | None:
    """When the rating was last given: optional, so a value that is no time is left out, not refused."""
    try:
        return fields.timestamp(f.get("updated_at") or f.get("created_at"))
    except FieldError:
        return None


class DifySource:
    name = "dify"
    coverage = "rated_conversations"

    def __init__(self, client: DifyFeedbacks, app: str):
        self.client, self.app = client, app

    def batches(self, cursor: dict, known: Callable[[str], bool], progress: Callable[[str], None]) -> Iterator[Batch]:
        # End-user ID → (type, session_id), or None: asked once per pull, and never written to the cursor
        # (a session_id is the app's own name for its user).
        users: dict[str, tuple[str, str] | None] = {}
        self.client.endpoint.notice = progress
        feedbacks = self.client.feedbacks(progress)
        rated, unresolved, complete_listing = read_feedbacks(feedbacks)
        ratings = ratings_of(rated)
        wanted: dict[tuple[str, str], list[str]] = defaultdict(list)  # (conversation, session) → rated messages
        for f in rated:
            if f.end_user not in users:
                users[f.end_user] = _session(self.client.end_user(f.end_user))
            known_user = users[f.end_user]
            if known_user is None:
                unresolved[UNKNOWN_USER] += 1
            elif known_user[0] != "service_api":
                unresolved[WEBAPP] += 1
            else:
                wanted[(f.conversation_id, known_user[1])].append(f.message_id)
        progress(f"{self.app}: {len(feedbacks)} feedbacks of {len(users)} end users, {len(wanted)} rated conversations")
        # Where each conversation was stored whole up to (its newest message then): the next pull reads
        # it down to there, if the store still holds that message; any other conversation is read whole.
        complete: dict[str, str] = dict(_complete(cursor))
        state = {"feedbacks": len(feedbacks), "newest_feedback": feedbacks[0].get("created_at") if feedbacks else None}
        for n, ((conversation, session), rated) in enumerate(sorted(wanted.items()), start=1):
            through = complete.get(conversation)
            listed = self.client.messages(conversation, session, through if through and known(through) else None)
            if listed is None:
                unresolved[DELETED] += len(rated)
                continue
            ids = {str(m.get("id")) for m in listed}
            unresolved[MISSING] += sum(m not in ids and not known(m) for m in rated)
            pulled = []
            for m in listed:
                try:
                    pulled.append(_message(m, conversation, session, ratings))
                except FieldError as e:
                    unresolved[e.skip("messages")] += 1
            if pulled:
                complete[conversation] = pulled[-1].message_id
            if n % 10 == 0 or n == len(wanted):
                progress(f"{self.app}: {n}/{len(wanted)} rated conversations read")
            # One conversation a batch: the cursor marking it whole is saved once all of it is stored.
            yield Batch(messages=pulled, pulled=len(pulled), cursor={**state, "complete": dict(complete)})
        yield Batch(
            ratings=ratings,
            ratings_complete=complete_listing,
            unresolved=+unresolved,
            cursor={**state, "complete": complete},
            feedbacks=len(feedbacks),
        )


def _complete(cursor: dict) -> dict[str, str]:
    """The cursor's conversations stored whole (conversation → its newest message then); a cursor of
    another shape (an older release's, a hand-edited one) marks none: they are read whole."""
    found = cursor.get("complete")
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def _session(end_user: dict | None) -> tuple[str, str] | None:
    """(type, session_id) of an ``/end-users/{id}`` reply; None for an unknown user, or a reply without
    a usable ``session_id`` (it is the ``user`` the conversation is read as)."""
    if end_user is None:
        return None
    try:
        session = fields.field(end_user, "session_id", fields.text)[0]
    except FieldError:
        return None
    return (str(end_user.get("type")), session) if session else None


def _message(m: dict, conversation: str, session: str, ratings: dict[str, UserFeedback]) -> PulledMessage:
    """A listed message, every field checked (FieldError names the first that is not what Dify gives)."""
    message_id = fields.field(m, "id", fields.identifier)
    return PulledMessage(
        message_id=message_id,
        question=fields.field(m, "query", fields.text)[0],
        answer=fields.field(m, "answer", fields.text)[0],
        created_at=fields.field(m, "created_at", fields.timestamp),
        contexts=resource_contexts(m.get("retriever_resources")),
        conversation_id=conversation,
        user=session,
        feedback=ratings.get(message_id),
    )


def open_source(request: SourceRequest) -> DifySource:
    spec = load_platform_spec(request, "dify")
    if spec.spec.agent.retrieval_only:
        raise RagtrackError(
            f"--version {spec.name}: a retrieval_only spec holds a knowledge-base key; pull with the app's"
        )
    client = DifyFeedbacks(spec_endpoint(spec, request, dify_check), request.app or spec.name)
    return DifySource(client, request.app or spec.name)
