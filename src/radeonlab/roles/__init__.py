"""radeonlab's pyinfra roles: one folder each, a `@deploy` function, a visible DEFAULTS dict."""

from typing import Any, Protocol, overload


class InventoryData(Protocol):
    """One host's inventory data as the roles' plan functions read it: pyinfra's `host.data` in a deploy (a
    HostData, which has `get` but is no Mapping), a plain dict in the tests."""

    @overload
    def get(self, key: str, /) -> Any: ...
    @overload
    def get(self, key: str, default: Any, /) -> Any: ...
