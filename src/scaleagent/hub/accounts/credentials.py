"""Clouddriver's Account Management API (`/credentials`, Spinnaker 1.28+) on the hub, with the
Scale Agent's two ways of turning its accounts into dynamic accounts: interception and the scan.

Spinnaker's Account Management keeps account definitions as data (`POST /credentials` creates
one, `PUT` replaces it, `DELETE /credentials/{name}` removes it). Teams that already use it, or
tools written against it, keep doing so with the hub in Clouddriver's place:

- interceptor off (`dynamicAccounts.interceptor.enabled: false`, the default): the requests do
  what Account Management does, and nothing else: the definitions are stored in
  `clouddriver_credentials`, replaced and deleted there.
- interceptor on: a Kubernetes definition POSTed becomes a dynamic account at once (created and
  migrated, as `POST` then `PATCH state: ACTIVE` on `/armory/accounts` would), and is stored as
  well so that `GET /credentials` still shows it. A `PUT` of an account that is a dynamic account
  changes it, and its agents are sent the new settings (`AccountsService.patch`); a `DELETE`
  deletes it, telling its agents first (`AccountsService.delete`). Names that are not dynamic
  accounts fall back to the stored definitions, as with the interceptor off.
- the scan (`dynamicAccounts.namePatterns`): every `scanFrequencySeconds`, stored Kubernetes
  definitions whose whole name matches a pattern and that are not in `kubesvc_accounts` yet are
  created and migrated. Each definition is migrated automatically once (`migrated_at`): deleting
  the dynamic account afterwards is not undone by the next scan.

A definition is checked whole before anything is written: its `type` (only `kubernetes`), the
fields Clouddriver's Kubernetes accounts have (typed as Clouddriver types them; those the
Scale Agent has no use for, like `cacheThreads` or `permissions`, are kept and ignored), and the
settings a dynamic account takes by the same rules as `/armory/accounts`. An inline kubeconfig
(`kubeconfigContents`) is refused: the hub never stores credentials in plain text, and a
definition is stored and answered as given.

Every write of a request happens after all its checks; when a request needs two writes (the
dynamic account, then the definition) and the second fails, the first is undone, so that a
rejected request leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..numbers import INT32_MAX, INT64_MAX
from ..states import AccountState
from ..store import AccountRow, CredentialsExist, CredentialsNotFound, CredentialsRow, Store, StoreError
from .errors import Conflict, InvalidRequest, UnknownAccounts
from .models import (
    ACCOUNT_NAME_SCHEMA,
    SETTINGS,
    AccountChange,
    AccountIn,
    _json_kind,  # the API's own wording of JSON values, so that both APIs read the same
    _problem,
    check_account_name,
)
from .service import SOURCE, AccountsService

if TYPE_CHECKING:
    from ..config import DynamicAccountsConfig

__all__ = [
    "KUBERNETES",
    "CredentialsService",
    "Definition",
    "definition_schema",
    "definition_view",
    "parse_definition",
    "summary_view",
]

KUBERNETES = "kubernetes"
"""The only account type the hub accepts: it manages Kubernetes accounts."""

PERMISSIONS = ("READ", "WRITE", "EXECUTE", "CREATE")
"""Fiat's authorizations, the keys of a definition's `permissions`."""

SUMMARY_KEYS = ("name", "environment", "accountType", "requiredGroupMembership", "permissions")
"""What Clouddriver's `GET /credentials` shows of an account unless asked to `expand`."""

log = logging.getLogger("scaleagent.hub.credentials")


# --- the definition ------------------------------------------------------------------------------


class _CustomResource(BaseModel):
    """Clouddriver's CustomKubernetesResource: a custom kind the account deploys."""

    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)

    kubernetesKind: str
    spinnakerKind: str | None = None
    deployPriority: str | None = None
    versioned: bool | None = None
    namespaced: bool | None = None


class _KubernetesDefinition(BaseModel):
    """A Kubernetes account as Clouddriver's Account Management takes it (its
    `KubernetesAccountProperties.ManagedAccount`, typed the same), plus the Scale Agent's own
    settings (`zoneId`, `onlyNamespacedResources`, `customResourceDefinitions`). Any other key is
    refused by name: a typo must not silently become a setting that does nothing."""

    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)

    type: str
    name: str
    # Used by the Scale Agent (mapped onto the dynamic account).
    kubeconfigFile: str | None = None
    context: str | None = None
    serviceAccount: bool | None = None
    namespaces: list[str] | None = None
    omitNamespaces: list[str] | None = None
    kinds: list[str] | None = None
    omitKinds: list[str] | None = None
    customResources: list[_CustomResource] | None = None
    # Clouddriver's, kept in the definition and not used by the Scale Agent.
    environment: str | None = None
    accountType: str | None = None
    kubeconfigContents: str | None = None  # refused when set (see `parse_definition`)
    oAuthServiceAccount: str | None = None
    oAuthScopes: list[str] | None = None
    kubectlExecutable: str | None = None
    # Bounded as Clouddriver's Java types (Integer, int, Long) hold them: Clouddriver itself would
    # refuse more when it reads the definition.
    kubectlRequestTimeoutSeconds: int | None = Field(None, ge=0, le=INT32_MAX)
    cacheThreads: int | None = Field(None, ge=1, le=INT32_MAX)
    requiredGroupMembership: list[str] | None = None
    permissions: dict[str, list[str]] | None = None
    namingStrategy: str | None = None
    debug: bool | None = None
    metrics: bool | None = None
    checkPermissionsOnStartup: bool | None = None
    cachingPolicies: list[dict[str, Any]] | None = None
    onlySpinnakerManaged: bool | None = None
    cacheIntervalSeconds: int | None = Field(None, ge=0, le=INT64_MAX)
    cacheAllApplicationRelationships: bool | None = None
    rawResourcesEndpointConfig: dict[str, Any] | None = None
    providerVersion: str | None = None
    dockerRegistries: list[Any] | None = None
    configureImagePullSecrets: bool | None = None
    primaryAccount: bool | None = None
    liveManifestCalls: bool | None = None
    # The Scale Agent's own (also in /armory/accounts).
    zoneId: str | None = None
    onlyNamespacedResources: bool | None = None
    customResourceDefinitions: list[str] | None = None

    @field_validator("permissions")
    @classmethod
    def _permissions(cls, value: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        unknown = [key for key in value or {} if key not in PERMISSIONS]
        if unknown:
            raise ValueError(f"{', '.join(map(repr, unknown))}: not an authorization; use {', '.join(PERMISSIONS)}")
        return value


_ACCOUNT_KEYS = (
    "zoneId",
    "kubeconfigFile",
    "context",
    "namespaces",
    "omitNamespaces",
    "kinds",
    "omitKinds",
    "onlyNamespacedResources",
)
"""The definition's keys that carry over to the dynamic account under the same name."""


@dataclass(frozen=True)
class Definition:
    """A definition that passed every check: `body` as given (stored and answered as it is),
    `account` the dynamic account it makes (AccountIn's fields, camelCase, unset ones absent)."""

    name: str
    type: str
    body: dict[str, Any]
    account: dict[str, Any]

    def account_in(self) -> AccountIn:
        """The dynamic account to create (POST /armory/accounts's model)."""
        return AccountIn.model_validate(self.account, strict=True)

    def account_change(self, *, migrate: bool) -> AccountChange:
        """The change that makes an existing dynamic account what this definition says: a PUT
        replaces the whole definition, so a setting it leaves out is cleared. `zoneId` is the
        exception: left out, the zone stays (a migration records the zone of the agent that took
        the account; clearing it would move the account for nothing)."""
        fields: dict[str, Any] = {"name": self.name}
        for key in ("kubeconfigFile", *SETTINGS):
            fields[key] = self.account.get(key)
        if "zoneId" in self.account:
            fields["zoneId"] = self.account["zoneId"]
        if migrate:
            fields["state"] = AccountState.ACTIVE.value
        return AccountChange.model_validate(fields, strict=True)


def definition_schema() -> dict[str, Any]:
    """The JSON schema of a definition `parse_definition` takes, for the API's description: the
    model's fields and types, the account name's rule, `type` "kubernetes", `kubeconfigContents`
    empty if given at all; the rules no schema says (the dynamic account's) are in the words of
    the 400."""
    schema = _KubernetesDefinition.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    schema = inline(schema)
    properties = schema["properties"]
    properties["type"] = {"type": "string", "enum": [KUBERNETES]}
    properties["name"] = {**ACCOUNT_NAME_SCHEMA, "title": "Name"}
    properties["kubeconfigContents"] = {
        "anyOf": [{"type": "string", "maxLength": 0}, {"type": "null"}],
        "description": "Refused unless empty: give kubeconfigFile with an encryptedFile: reference",
    }
    permissions = properties["permissions"]["anyOf"][0]
    permissions["propertyNames"] = {"enum": list(PERMISSIONS)}
    return schema


def parse_definition(body: Any) -> Definition:
    """Check a request body as one Kubernetes account definition. Raises InvalidRequest listing
    every problem, each naming the account and the field; values that may be secret are never
    repeated."""
    if not isinstance(body, dict):
        raise InvalidRequest(
            f'the body must be a JSON object (one account definition with its "type"), got {_json_kind(body)}'
        )
    name = body.get("name")
    label = f"account {name!r}" if isinstance(name, str) and 0 < len(name) <= 253 else "the account"
    kind = body.get("type")
    if kind is None:
        raise InvalidRequest(f'{label}: type: required: the account\'s type, "{KUBERNETES}"')
    if not isinstance(kind, str):
        raise InvalidRequest(f"{label}: type: expected a string, got {_json_kind(kind)}")
    if kind != KUBERNETES:
        shown = kind if len(kind) <= 60 else kind[:57] + "..."
        raise InvalidRequest(
            f"{label}: type: {shown!r} accounts are not accepted here: the hub manages {KUBERNETES!r} accounts only"
        )
    problems: list[str] = []
    if body.get("kubeconfigContents") not in (None, ""):
        problems.append(
            f"{label}: kubeconfigContents: an inline kubeconfig is not accepted (the hub never stores "
            "credentials in plain text): put it in a Kubernetes Secret and give kubeconfigFile: "
            "'encryptedFile:k8s!n:<secret>!k:<key>!ns:<namespace>' (the value is not shown)"
        )
    # Two stages, reported together: Clouddriver's types, then the dynamic account's rules on the
    # fields that passed the first (a field already reported is not reported twice).
    failed: set[Any] = {"kubeconfigContents"}
    try:
        _KubernetesDefinition.model_validate(body, strict=True)
    except ValidationError as e:
        fields = list(_KubernetesDefinition.model_fields)
        for err in e.errors():
            failed.add(err["loc"][0] if err["loc"] else None)
            if err["loc"][:1] != ("kubeconfigContents",):
                problems.append(f"{label}: {_describe(err, body, fields)}")
    if body.get("serviceAccount") is True and body.get("kubeconfigFile") and "kubeconfigFile" not in failed:
        problems.append(
            f"{label}: serviceAccount: cannot be true when kubeconfigFile is also set: an account "
            "uses either a kubeconfig or the service account"
        )
    account = _account_fields(body, failed)
    if "name" not in failed:
        try:
            AccountIn.model_validate(account, strict=True)
        except ValidationError as e:
            known = list(AccountIn.model_fields)
            for err in e.errors():
                message = _problem(err, account, known)
                if err["loc"][:1] == ("customResourceDefinitions",) and not body.get("customResourceDefinitions"):
                    message = "customResources[].kubernetesKind" + message.removeprefix("customResourceDefinitions")
                problems.append(f"{label}: {message}")
    if problems:
        raise InvalidRequest(problems)
    return Definition(name=name, type=kind, body=body, account=account)  # type: ignore[arg-type]


def _describe(error: Any, body: dict[str, Any], fields: list[str]) -> str:
    """One validation error in words: /armory/accounts' wording, and the integer checks that only
    Clouddriver's fields have."""
    where = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in error["loc"]).replace(".[", "[")
    value = body.get(error["loc"][0]) if len(error["loc"]) == 1 else None
    if error["type"] in ("int_type", "greater_than_equal", "less_than_equal") and len(error["loc"]) == 1:
        low, high = _bounds(str(error["loc"][0]))
        if error["type"] == "int_type" and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"{where}: expected an integer, got {_json_kind(value)}"
        return f"{where}: expected a whole number from {low} to {high}, got {_json_kind(value)}"
    return _problem(error, body, fields)


def _bounds(field: str) -> tuple[Any, Any]:
    """The least and most a numeric field of the definition takes, as declared on the model."""
    low = high = None
    for m in _KubernetesDefinition.model_fields[field].metadata:
        low = getattr(m, "ge", low)
        high = getattr(m, "le", high)
    return low, high


def _account_fields(body: dict[str, Any], failed: set[Any]) -> dict[str, Any]:
    """The dynamic account a definition makes, from the fields that passed Clouddriver's types
    (`failed` names the others). Clouddriver writes unset lists as [] and unset strings as null or
    "": all of them mean "not set" here."""
    account: dict[str, Any] = {"name": body.get("name")}
    for key in _ACCOUNT_KEYS:
        value = body.get(key)
        if key not in failed and value not in (None, "", []):
            account[key] = value
    crds: list[str] = []
    if "customResourceDefinitions" not in failed:
        crds += body.get("customResourceDefinitions") or []
    if "customResources" not in failed:
        crds += [r["kubernetesKind"] for r in body.get("customResources") or []]
    if crds:
        account["customResourceDefinitions"] = list(dict.fromkeys(crds))
    return account


def definition_view(row: CredentialsRow) -> dict[str, Any]:
    """A stored definition as `GET /credentials/{name}` answers it: as it was given."""
    return {**row.body, "type": row.type, "name": row.name}


def summary_view(row: CredentialsRow) -> dict[str, Any]:
    """A definition as Clouddriver's `GET /credentials` lists accounts without `expand`: a few
    identifying fields; `environment` and `accountType` default to the name, as Clouddriver's
    Kubernetes credentials do."""
    body = row.body
    return {
        "name": row.name,
        "type": row.type,
        "cloudProvider": row.type,
        "environment": body.get("environment") or row.name,
        "accountType": body.get("accountType") or row.name,
        "requiredGroupMembership": body.get("requiredGroupMembership") or [],
        "permissions": body.get("permissions") or {},
    }


_NOT_SERVED = frozenset({"INACTIVE", "DELETING", "DELETE_FAILED"})


def _served_view(account: AccountRow, expand: bool) -> dict[str, Any]:
    """An account with no stored definition, as `GET /credentials` lists it: the summary's
    fields, or (expanded) its settings, where it comes from (`source`: agent, or api for a dynamic account) and its
    lifecycle `state`. Never credentials: the properties of an account hold none."""
    permissions = account.properties.get("permissions") or {}
    if not expand:
        return {
            "name": account.name,
            "type": KUBERNETES,
            "cloudProvider": KUBERNETES,
            "environment": account.name,
            "accountType": account.name,
            "requiredGroupMembership": [],
            "permissions": permissions if isinstance(permissions, dict) else {},
        }
    settings = {k: v for k, v in account.properties.items() if k in SETTINGS}
    return {"type": KUBERNETES, "name": account.name, **settings, "source": account.source, "state": account.state}


class DefinitionNotFound(UnknownAccounts):
    """No definition (nor, when intercepting, dynamic account) by that name: a 404."""


# --- the service ---------------------------------------------------------------------------------


class CredentialsService:
    """Account Management requests and the `namePatterns` scan, over the store and the
    dynamic accounts service. `start()` after the accounts service's, `stop()` before it."""

    def __init__(self, store: Store, accounts: AccountsService, *, config: DynamicAccountsConfig) -> None:
        self.store = store
        self.accounts = accounts
        self.config = config
        self.patterns = [re.compile(p) for p in config.name_patterns]
        self._locks: dict[str, asyncio.Lock] = {}
        self._scan_task: asyncio.Task[None] | None = None
        self._warned: dict[str, datetime] = {}

    @property
    def intercepting(self) -> bool:
        """Whether Account Management requests for Kubernetes accounts act on dynamic accounts."""
        return self.config.interceptor.enabled

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the scan loop when there are `namePatterns`. The first scan comes one interval
        after the start, so that agents have reconnected to take what it migrates."""
        if self.patterns:
            self._scan_task = asyncio.get_running_loop().create_task(self._scan_forever(), name="credentials scan")
        log.info(
            "Account Management (/credentials): interceptor %s; %s",
            "on" if self.intercepting else "off",
            f"definitions matching {', '.join(p.pattern for p in self.patterns)} are migrated every "
            f"{self.config.scan_frequency_seconds:g}s"
            if self.patterns
            else "no namePatterns: no scan",
        )

    async def stop(self) -> None:
        """Stop the scan loop (a scan cut short resumes at the next start: what it had not
        claimed is still unmigrated)."""
        if self._scan_task is not None:
            self._scan_task.cancel()
            await asyncio.wait([self._scan_task])
            self._scan_task = None

    # --- requests ------------------------------------------------------------------------------

    async def create(self, body: Any) -> CredentialsRow:
        """POST /credentials: store a new definition; when intercepting, make it a dynamic account
        and migrate it. Raises InvalidRequest, or Conflict when the name is taken (a definition,
        or when intercepting any account of kubesvc_accounts)."""
        definition = self._parse(body)
        name = definition.name
        async with self._locked(name):
            if not self.intercepting:
                try:
                    return await self.store.create_credentials(name, definition.type, definition.body)
                except CredentialsExist as e:
                    raise Conflict(f"{e}: choose another name") from None
            if await self.store.get_credentials(name) is not None:
                raise Conflict(f"account {name!r} already exists: choose another name")
            await self.accounts.create([definition.account_in()])  # Conflict if in kubesvc_accounts
            try:
                row = await self.store.create_credentials(name, definition.type, definition.body, migrated_at=_now())
            except CredentialsExist as e:  # another replica, meanwhile
                await self._undo(name, definition=False)
                raise Conflict(f"{e}: choose another name") from None
            except BaseException:
                await self._undo(name, definition=False)
                raise
            try:
                await self.accounts.patch([AccountChange(name=name, state="ACTIVE")])
            except BaseException:
                await self._undo(name, definition=True)
                raise
            log.info("Account Management: account %s intercepted: it is a dynamic account, being migrated", name)
            return row

    async def update(self, body: Any) -> CredentialsRow:
        """PUT /credentials: replace a definition. When intercepting and the name is a dynamic
        account, change that account (its agents get the new settings; a FAILED one is migrated
        again) and store the definition. Raises InvalidRequest, DefinitionNotFound, or Conflict
        (the account is in the middle of a migration).

        The account is changed first because that is the write that can be refused (a migration
        in progress, a concurrent change); only a database failure can stop the definition's
        write after it, and repeating the PUT then completes it (the change is already made, so
        it is not made twice)."""
        definition = self._parse(body)
        name = definition.name
        async with self._locked(name):
            if self.intercepting:
                row = await self.store.get_account(name)
                if row is not None and row.source == SOURCE:
                    retry = row.state == AccountState.FAILED and row.desired_state == AccountState.ACTIVE
                    await self.accounts.patch([definition.account_change(migrate=retry)])
                    stored = await self.store.upsert_credentials(name, definition.type, definition.body, migrated=True)
                    log.info("Account Management: account %s changed through PUT /credentials", name)
                    return stored
            try:
                return await self.store.update_credentials(name, type=definition.type, body=definition.body)
            except CredentialsNotFound:
                raise await self._not_found(name) from None

    async def delete(self, name: str) -> tuple[list[str], list[str], bool]:
        """DELETE /credentials/{name}: delete the definition; when intercepting and the name is a
        dynamic account, delete that account too, its agents told first. Returns (names deleted,
        warnings from agents, whether a dynamic account was deleted). DefinitionNotFound when
        there is nothing by that name to delete."""
        _check_name(name)
        warnings: list[str] = []
        dynamic = False
        async with self._locked(name):
            if self.intercepting:
                row = await self.store.get_account(name)
                if row is not None and row.source == SOURCE:
                    try:
                        _, warnings = await self.accounts.delete([name])
                        dynamic = True
                    except UnknownAccounts:
                        pass  # deleted meanwhile, through /armory/accounts
            stored = await self.store.delete_credentials(name)
            if not (stored or dynamic):
                raise await self._not_found(name)
        if dynamic:
            log.info("Account Management: account %s deleted through DELETE /credentials", name)
        return [name], warnings, dynamic

    async def get(self, name: str) -> CredentialsRow:
        """One stored definition; DefinitionNotFound if there is none."""
        _check_name(name)
        row = await self.store.get_credentials(name)
        if row is None:
            raise await self._not_found(name)
        return row

    async def list_definitions(
        self, *, type: str | None = None, start: str | None = None, limit: int | None = None
    ) -> list[CredentialsRow]:
        """Stored definitions ordered by name (see `Store.list_credentials`)."""
        return await self.store.list_credentials(type=type, start=start, limit=limit)

    async def list_served(self, *, expand: bool) -> list[dict[str, Any]]:
        """What `GET /credentials` lists: every stored definition, and every account the hub
        serves without one (registered by an agent from its own file, or created through
        /armory/accounts), so that Spinnaker tooling reading Clouddriver's list sees them all.
        Accounts no agent is asked to follow (INACTIVE, DELETING, DELETE_FAILED) are left out."""
        view = definition_view if expand else summary_view
        listed = {row.name: view(row) for row in await self.store.list_credentials()}
        for account in await self.store.list_accounts():
            if account.name in listed or account.state in _NOT_SERVED:
                continue
            listed[account.name] = _served_view(account, expand)
        return [listed[name] for name in sorted(listed)]

    # --- the scan ------------------------------------------------------------------------------

    async def scan_once(self) -> list[str]:
        """Migrate the stored Kubernetes definitions whose whole name matches a `namePatterns`
        pattern, that were never migrated and whose name is not in kubesvc_accounts: each is
        claimed (so that one replica does it), created as a dynamic account and migrated.
        Returns the names migrated. A definition that cannot become an account is skipped with a
        warning (once per version of it); a store failure raises StoreError."""
        if not self.patterns:
            return []
        rows = [
            r
            for r in await self.store.list_credentials(type=KUBERNETES)
            if r.migrated_at is None and any(p.fullmatch(r.name) for p in self.patterns)
        ]
        if not rows:
            return []
        taken = {a.name for a in await self.store.list_accounts(names=[r.name for r in rows])}
        created: list[str] = []
        for row in rows:
            if row.name in taken:
                continue
            async with self._locked(row.name):
                if await self._scan_one(row):
                    created.append(row.name)
        if created:
            await self._migrate(created)
            log.info("namePatterns scan: migrating %s", ", ".join(created))
        return created

    async def _scan_one(self, row: CredentialsRow) -> bool:
        """Claim one definition and create its dynamic account; whether it was created."""
        try:
            definition = parse_definition({**row.body, "type": row.type, "name": row.name})
            refused = self.accounts.resolver.refusal(definition.account.get("kubeconfigFile"))
            if refused is not None:
                raise InvalidRequest(f"kubeconfigFile: {refused}")
        except InvalidRequest as e:
            if self._warned.get(row.name) != row.updated_at:
                self._warned[row.name] = row.updated_at
                log.warning(
                    "namePatterns scan: definition %s cannot become a dynamic account: %s; fix it with "
                    "PUT /credentials",
                    row.name,
                    e,
                )
            return False
        if not await self.store.claim_credentials(row.name):
            return False  # another replica, or a request, got there first
        try:
            await self.accounts.create([definition.account_in()])
        except Conflict as e:
            log.info("namePatterns scan: %s is not migrated: %s", row.name, e)  # created meanwhile
            return False
        except BaseException:
            with contextlib.suppress(StoreError):
                await self.store.update_credentials(row.name, migrated_at=None)  # the next scan tries again
            raise
        return True

    async def _migrate(self, names: list[str]) -> None:
        """PATCH state ACTIVE for accounts the scan created: all at once, or one by one if one of
        them changed meanwhile (deleted, or migrated by hand), so that the others still go."""
        try:
            await self.accounts.patch([AccountChange(name=n, state="ACTIVE") for n in names])
            return
        except (Conflict, UnknownAccounts, InvalidRequest):
            pass
        except StoreError as e:
            log.error(
                "namePatterns scan: %s created but not migrated (%s); migrate them with PATCH /armory/accounts "
                "(state ACTIVE)",
                ", ".join(names),
                e,
            )
            raise
        for name in names:
            try:
                await self.accounts.patch([AccountChange(name=name, state="ACTIVE")])
            except (Conflict, UnknownAccounts, InvalidRequest) as e:
                log.info("namePatterns scan: %s was created but not migrated: %s", name, e)

    async def _scan_forever(self) -> None:
        """Every scanFrequencySeconds, a scan (a periodic timer: nothing waits on it for
        synchronisation). A failure is logged and the next scan tries again."""
        while True:
            await asyncio.sleep(self.config.scan_frequency_seconds)
            try:
                await self.scan_once()
            except StoreError as e:
                log.error("namePatterns scan: %s", e)
            except Exception:
                log.exception("namePatterns scan failed; trying again in %gs", self.config.scan_frequency_seconds)

    # --- helpers -------------------------------------------------------------------------------

    def _parse(self, body: Any) -> Definition:
        """A request's definition, refused (InvalidRequest: a 400) when its `kubeconfigFile` names
        a file outside `dynamicAccounts.kubeconfigDirectories`, as `/armory/accounts` refuses it:
        stored, it would wait for a scan or a migration to be refused, and read back as given."""
        definition = parse_definition(body)
        refused = self.accounts.resolver.refusal(definition.account.get("kubeconfigFile"))
        if refused is not None:
            raise InvalidRequest(f"account {definition.name!r}: kubeconfigFile: {refused}")
        return definition

    async def _undo(self, name: str, *, definition: bool) -> None:
        """Take back the writes of an intercepted POST that failed half way: the dynamic account
        (INACTIVE, so no agent is told anything) and, if written, the definition."""
        try:
            await self.accounts.delete([name])
        except (UnknownAccounts, StoreError) as e:
            log.error("Account Management: could not take back dynamic account %s after a failed POST: %s", name, e)
        if definition:
            try:
                await self.store.delete_credentials(name)
            except StoreError as e:
                log.error("Account Management: could not take back definition %s after a failed POST: %s", name, e)

    async def _not_found(self, name: str) -> DefinitionNotFound:
        """The 404 for `name`, saying so when it is an account of an agent's own file."""
        row = await self.store.get_account(name)
        if row is not None and row.source != SOURCE:
            return DefinitionNotFound([], [name])
        return DefinitionNotFound([name])

    @contextlib.asynccontextmanager
    async def _locked(self, name: str) -> AsyncIterator[None]:
        """Requests (and the scan) on one name, one at a time in this process."""
        async with self._locks.setdefault(name, asyncio.Lock()):
            yield


def _check_name(name: str) -> None:
    try:
        check_account_name(name)
    except ValueError as e:
        raise InvalidRequest(f"name: {e}") from None


def _now() -> datetime:
    return datetime.now(UTC)
