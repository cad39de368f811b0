"""Settings of authentication that the hub's configuration and the auth modules both use: group
lists and account permissions as Spinnaker writes them, and one agent identity. They live here,
in the lowest layer of the hub, so that the auth modules need not import the configuration."""

from __future__ import annotations

import re

from pydantic import StrictStr, field_validator, model_validator

from ...configfile import ConfigModel, invalid, normalize_permissions, normalize_roles, regular_expressions

__all__ = ["AgentIdentityConfig", "normalize_permissions", "normalize_roles"]


class AgentIdentityConfig(ConfigModel):
    """One agent identity: how it proves itself (a token whose SHA-256 is `tokenHash`, or a client
    certificate whose subject CN is `commonName`) and what it may serve."""

    name: StrictStr
    token_hash: StrictStr | None = None
    common_name: StrictStr | None = None
    # Zones it may declare; empty means none (an identity must be given its zones).
    zones: tuple[StrictStr, ...] = ()
    # Account names it may stream (regular expressions, whole names); empty means any account
    # of its zones.
    accounts: tuple[StrictStr, ...] = ()

    @field_validator("token_hash")
    @classmethod
    def _hash(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", value):
            raise invalid("expected 'sha256:' and 64 lowercase hex digits (scale-agent agents token prints it)")
        return value

    @field_validator("accounts")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return regular_expressions(value)

    @model_validator(mode="after")
    def _proof(self) -> AgentIdentityConfig:
        if self.token_hash is None and self.common_name is None:
            raise invalid("needs tokenHash or commonName: how else would the agent prove it is this one?", "tokenHash")
        if not self.zones:
            raise invalid("lists no zone: give the zones this agent may serve ('*' for any)", "zones")
        return self
