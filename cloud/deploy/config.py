"""Settings, resolved once: explicit argument > environment (DPSENSE_*) > default."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dpsense.cloud.errors import UsageError


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("dpsense-data")
    broker_host: str = "127.0.0.1"
    broker_port: int = 1883
    analyst_db: str = ""
    correction_db: str = ""
    # CA certificate (PEM) the broker's TLS certificate is checked against; "" = plain MQTT.
    tls_ca: str = ""
    # The correction server's folder (its key store, database, profile and noise key): a trust
    # zone of its own when it is not the data dir (docs/operating.md, "Two trust zones").
    correction_dir: Path | None = None

    def __post_init__(self) -> None:
        if not 0 < self.broker_port < 65536:
            raise UsageError("broker port must be in 1..65535, got %d" % self.broker_port)
        if self.correction_dir is None:
            object.__setattr__(self, "correction_dir", Path(self.data_dir))
        if not self.analyst_db:
            object.__setattr__(self, "analyst_db", "sqlite:///%s" % (Path(self.data_dir) / "analyst.db"))
        if not self.correction_db:
            object.__setattr__(self, "correction_db",
                               "sqlite:///%s" % (Path(self.cs_dir) / "correction.db"))
        if self.analyst_db == self.correction_db:
            raise UsageError("the analyst and the correction server must not share a database")

    @property
    def cs_dir(self) -> Path:
        """The correction server's folder: ``correction_dir``, else the data dir."""
        return Path(self.correction_dir if self.correction_dir is not None else self.data_dir)

    @property
    def two_zones(self) -> bool:
        """The analyst's data dir and the correction server's folder are different folders."""
        return os.path.abspath(self.data_dir) != os.path.abspath(self.cs_dir)

    @classmethod
    def resolve(cls, **explicit: Any) -> "Settings":
        env = os.environ
        values: dict[str, Any] = {}
        for name, conv in (("data_dir", Path), ("broker_host", str), ("broker_port", int),
                           ("analyst_db", str), ("correction_db", str),
                           ("tls_ca", str), ("correction_dir", Path)):
            var = "DPSENSE_" + name.upper()
            if explicit.get(name) is not None:
                values[name] = conv(explicit[name])
            elif env.get(var):
                try:
                    values[name] = conv(env[var])
                except ValueError:
                    raise UsageError("%s=%r is not a valid %s" % (var, env[var], name.replace("_", " "))) from None
        return cls(**values)

    def with_(self, **changes: Any) -> "Settings":
        return replace(self, **changes)
