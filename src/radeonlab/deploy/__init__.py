"""The deploys pyinfra runs, as functions: `setup.provision` (deploy/setup.py) and `verify.reverify`
(deploy/verify.py). The files under deploy/ at the checkout's root are their one-line pyinfra entry points."""
