"""Bearer tokens: who each one is, for which audiences, and the TokenReview that tells others.

A real kube-apiserver authenticates a bearer token through a union of token authenticators
(static token file, ServiceAccount JWTs, bootstrap tokens, OIDC, webhooks), wrapped so that
`system:authenticated` is added to every user's groups. `POST
/apis/authentication.k8s.io/v1/tokenreviews` runs that same chain on a token somebody else was
given (`pkg/registry/authentication/tokenreview/storage.go`), for the audiences the reviewer asks
(`spec.audiences`, else the API server's own, `--api-audiences`). kubesim keeps two kinds of tokens
and answers as that chain does (checked against kube-apiserver v1.20.2):

* **static tokens** (`--token-auth-file`: a name, a uid, groups): audience-agnostic, so they
  authenticate only for the API server's own audiences
  (`authenticator.WrapAudienceAgnosticToken`); asked for another audience they are "invalid
  bearer token";
* **ServiceAccount tokens** (what `TokenRequest` hands out): user
  `system:serviceaccount:<ns>:<name>` with groups `system:serviceaccounts`,
  `system:serviceaccounts:<ns>` and `system:authenticated`, the ServiceAccount's uid, and their
  own audiences (none: the API server's). They are valid while the ServiceAccount exists and only
  for a requested audience they carry.

An unknown or refused token is not an HTTP error: the review is created (201) with
`status.error` and without `status.authenticated` (Go's `omitempty` drops `false`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..kube.selectors import go_quote
from .errors import bad_request
from .rbac import ALL_AUTHENTICATED, UserInfo, service_account_user

__all__ = ["API_AUDIENCES", "INVALID_TOKEN", "Token", "TokenResult", "review_token", "token_review"]

API_AUDIENCES: tuple[str, ...] = ("https://kubernetes.default.svc.cluster.local",)
"""The API server's own audiences (`--api-audiences`, by default its `--service-account-issuer`)."""

INVALID_TOKEN = "invalid bearer token"
"""What the bearer token authenticator says when no token authenticator knew the token."""


@dataclass(frozen=True)
class Token:
    """What one bearer token stands for."""

    user: UserInfo
    service_account: tuple[str, str] | None = None
    """(namespace, name) for a ServiceAccount token: valid only while that ServiceAccount exists."""
    audiences: tuple[str, ...] = ()
    """A ServiceAccount token's audiences (none: the API server's own). Static tokens have none."""

    @staticmethod
    def static(name: str, groups: Sequence[str] = (), uid: str = "") -> Token:
        """A static token, with `system:authenticated` added as the apiserver's group adder does."""
        groups = tuple(groups)
        if ALL_AUTHENTICATED not in groups:
            groups += (ALL_AUTHENTICATED,)
        return Token(UserInfo(name, groups, uid))

    @staticmethod
    def for_service_account(namespace: str, name: str, audiences: Sequence[str] = ()) -> Token:
        return Token(service_account_user(namespace, name), (namespace, name), tuple(audiences))


@dataclass(frozen=True)
class TokenResult:
    """The answer of the token authenticators: a user and the audiences it is valid for, or an error."""

    user: UserInfo | None
    audiences: tuple[str, ...] = ()
    error: str = ""


def _go_strings(values: Sequence[str]) -> str:
    """`%q` of a Go []string: `["a" "b"]`."""
    return "[" + " ".join(go_quote(v) for v in values) + "]"


def review_token(
    token: Token | None,
    audiences: Sequence[str],
    api_audiences: Sequence[str],
    service_account_uid: Callable[[str, str], str | None],
) -> TokenResult:
    """Authenticate a known (or unknown: None) token for `audiences` (empty: the API server's).

    `service_account_uid(namespace, name)` is the uid of a stored ServiceAccount, None if there is
    none. The errors are kube-apiserver's: the token union aggregates "invalid bearer token" with
    the ServiceAccount authenticator's own error as `[a, b]`.
    """
    wanted = tuple(audiences) or tuple(api_audiences)
    if token is None:
        return TokenResult(None, error=INVALID_TOKEN)
    if token.service_account is None:  # audience-agnostic: only the API server's audiences
        common = tuple(a for a in wanted if a in api_audiences)
        return TokenResult(token.user, common) if common else TokenResult(None, error=INVALID_TOKEN)
    own = token.audiences or tuple(api_audiences)
    common = tuple(a for a in own if a in wanted)
    if not common:
        return TokenResult(
            None,
            error=f"[{INVALID_TOKEN}, token audiences {_go_strings(own)} is invalid for the target audiences "
            f"{_go_strings(wanted)}]",
        )
    namespace, name = token.service_account
    uid = service_account_uid(namespace, name)
    if uid is None:
        return TokenResult(None, error=f'[{INVALID_TOKEN}, serviceaccounts "{name}" not found]')
    return TokenResult(UserInfo(token.user.name, token.user.groups, uid), common)


def token_review(body: dict[str, Any], review: Callable[[str, Sequence[str]], TokenResult]) -> dict[str, Any]:
    """The TokenReview a kube-apiserver answers to `body` (already decoded and type-checked), given
    `review(token, audiences)`. A review without a token is a 400, as upstream."""
    spec = body.get("spec") or {}
    token = spec.get("token") or ""
    if not token:
        raise bad_request("token is required for TokenReview in authentication")
    audiences = list(spec.get("audiences") or [])
    result = review(token, audiences)
    out_spec: dict[str, Any] = {"token": token}
    if audiences:
        out_spec["audiences"] = audiences
    status: dict[str, Any] = {}
    user: dict[str, Any] = {}
    if result.user is not None:
        status["authenticated"] = True
        user["username"] = result.user.name
        if result.user.uid:
            user["uid"] = result.user.uid
        if result.user.groups:
            user["groups"] = list(result.user.groups)
    status["user"] = user
    if result.user is not None and result.audiences:
        status["audiences"] = list(result.audiences)
    if result.error:
        status["error"] = result.error
    return {
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {**(body.get("metadata") or {}), "creationTimestamp": None},
        "spec": out_spec,
        "status": status,
    }
