"""Settings, resolved once: explicit argument > environment (DPSENSE_*) > default."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("dpsense-data")
    broker_host: str = "127.0.0.1"
    broker_port: int = 1883
    analyst_db: str = ""
    correction_db: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.broker_port < 65536:
            raise ValueError("broker port must be in 1..65535")
        if not self.analyst_db:
            object.__setattr__(self, "analyst_db", "sqlite:///%s" % (Path(self.data_dir) / "analyst.db"))
        if not self.correction_db:
            object.__setattr__(self, "correction_db",
                               "sqlite:///%s" % (Path(self.data_dir) / "correction.db"))
        if self.analyst_db == self.correction_db:
            raise ValueError("the analyst and the correction server must not share a database")

    @classmethod
    def resolve(cls, **explicit: Any) -> "Settings":
        env = os.environ
        values: dict[str, Any] = {}
        for name, conv in (("data_dir", Path), ("broker_host", str), ("broker_port", int),
                           ("analyst_db", str), ("correction_db", str)):
            if explicit.get(name) is not None:
                values[name] = conv(explicit[name])
            elif env.get("DPSENSE_" + name.upper()):
                values[name] = conv(env["DPSENSE_" + name.upper()])
        return cls(**values)

    def with_(self, **changes: Any) -> "Settings":
        return replace(self, **changes)
