"""radeonlab's pyinfra roles: one folder each, a `@deploy` function, a visible DEFAULTS dict."""
