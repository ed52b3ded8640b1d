"""The sandbox: simulated Radeon workstations on one machine, for the tests and the demo.

Everything here is SIMULATED and says so: real Debian hosts (debootstrap + overlayfs + unshare + sshd on
loopback) that stand in for workstations, sysfs trees recorded from real Radeon cards that stand in for the
cards, a signed apt repository shaped like AMD's holding stand-in ROCm packages, and a wheel index whose CPU
PyTorch stands in for the ROCm build. The product is pointed at these stand-ins only through its own settings
(inventory host data); it has no test-only branches.
"""
