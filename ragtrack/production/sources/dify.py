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
   conversation, down to the first message a previous pull stored.

What it cannot read is counted by reason, per feedback: WebApp users' conversations (Dify scopes
conversations to their end user, and a web-page user is not a service API user), deleted
conversations, end users Dify no longer knows, and ratings given by an admin in the console. And
what it reads is only the rated conversations (coverage ``rated_conversations``): a rate over them
is not the app's rate. Dify's MLflow tracing (``--from mlflow``) sees the whole traffic.

:class:`DifyFeedbacks` is also how ``--from mlflow`` joins these ratings to Dify's traces.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ragtrack.agents.base import read_secret
from ragtrack.agents.dify import dify_check, resource_contexts
from ragtrack.agents.endpoint import Endpoint, EndpointError, bearer_endpoint
from ragtrack.errors import RagtrackError
from ragtrack.llm.accounting import Usage
from ragtrack.production import fields
from ragtrack.production.fields import FieldError
from ragtrack.production.sources import Batch, PulledMessage, SourceRequest, UserFeedback
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


def spec_endpoint(spec: LoadedSpec, request: SourceRequest, check) -> Endpoint:
    """The spec's base URL with its key, retried and throttled as an eval's calls are."""
    table = spec.spec.agent
    key = read_secret(spec, table.api_key_env)
    return bearer_endpoint(
        table.base_url,
        key,
        timeout_s=table.timeout_s or request.config.eval.timeout_s,
        max_concurrency=table.max_concurrency,
        min_concurrency=table.concurrency_floor,
        check=check,
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
        """Every feedback of the app (end users' and admins'), newest first."""
        out: list[dict] = []
        page = 1
        while True:
            try:
                reply = self.get("/app/feedbacks", {"page": page, "limit": FEEDBACK_PAGE})
            except EndpointError as e:
                raise RagtrackError(f"Dify at {self.endpoint.base_url}: /app/feedbacks: {e}") from None
            items = [f for f in (reply.get("data") if isinstance(reply, dict) else None) or [] if isinstance(f, dict)]
            out += items
            progress(f"{self.label}: {len(out)} feedbacks read")
            if len(items) < FEEDBACK_PAGE:  # the reply has no has_more: a short page is the last
                return out
            page += 1

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
        try:
            reply = self.get(path)
        except EndpointError as e:
            if e.status == 404:
                return None
            raise RagtrackError(f"Dify at {self.endpoint.base_url}: {path}: {e}") from None
        return reply if isinstance(reply, dict) else None

    def messages(self, conversation_id: str, user: str, known: Callable[[str], bool]) -> list[dict] | None:
        """The conversation's messages, oldest first, down to (not including) the newest one ``known``
        already holds; None when Dify says the conversation does not exist (deleted) for this user."""
        newest_first: list[dict] = []
        params: dict[str, Any] = {"conversation_id": conversation_id, "user": user, "limit": PAGE}
        while True:
            try:
                reply = self.get("/messages", params)
            except EndpointError as e:
                if e.status == 404 and "conversation" in str(e).lower():
                    return None
                raise RagtrackError(f"Dify at {self.endpoint.base_url}: /messages: {e}") from None
            page = [m for m in (reply.get("data") if isinstance(reply, dict) else None) or [] if isinstance(m, dict)]
            for m in reversed(page):  # a page is oldest first; walk it newest first
                if known(str(m.get("id"))):
                    return newest_first[::-1]
                newest_first.append(m)
            if not page or not (isinstance(reply, dict) and reply.get("has_more")):
                return newest_first[::-1]
            params["first_id"] = page[0].get("id")


@dataclass(frozen=True)
class Rated:
    """An end user's feedback of ``/app/feedbacks``, every field checked."""

    message_id: str
    conversation_id: str
    end_user: str  # Dify's end-user ID (``from_end_user_id``)
    feedback: UserFeedback | None  # None: the feedback holds no rating (withdrawn)


def read_feedbacks(feedbacks: list[dict]) -> tuple[list[Rated], Counter[str]]:
    """The end users' feedbacks, checked field by field; those not read counted by reason: admins'
    (:data:`ADMIN`) and malformed ones, by field (a ``rating`` of ``5`` is no like or dislike)."""
    out: list[Rated] = []
    skipped: Counter[str] = Counter()
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
            continue
        out.append(rated)
    return out, skipped


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
        feedbacks = self.client.feedbacks(progress)
        rated, unresolved = read_feedbacks(feedbacks)
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
        # Where the next pull starts is what the store holds (each conversation is read down to it); the
        # cursor only records what this one saw.
        state = {"feedbacks": len(feedbacks), "newest_feedback": feedbacks[0].get("created_at") if feedbacks else None}
        for n, ((conversation, session), rated) in enumerate(sorted(wanted.items()), start=1):
            listed = self.client.messages(conversation, session, known)
            if listed is None:
                unresolved[DELETED] += len(rated)
                yield Batch(cursor=state)
                continue
            ids = {str(m.get("id")) for m in listed}
            unresolved[MISSING] += sum(m not in ids and not known(m) for m in rated)
            pulled = []
            for m in listed:
                try:
                    pulled.append(_message(m, conversation, session, ratings))
                except FieldError as e:
                    unresolved[e.skip("messages")] += 1
            if n % 10 == 0 or n == len(wanted):
                progress(f"{self.app}: {n}/{len(wanted)} rated conversations read")
            yield Batch(messages=pulled, pulled=len(pulled), cursor=state)
        yield Batch(ratings=ratings, unresolved=+unresolved, cursor=state, feedbacks=len(feedbacks))


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
