#!/usr/bin/env python3
"""make_bundle.py BUNDLE ROOTFS [KEY=JSON ...]

Writes BUNDLE/config.json: the config `runc spec` makes (runc 1.1's
defaults, written out here so that the suite does not need runc to make
one), with root.path = ROOTFS (absolute), root.readonly false, and each
KEY=JSON applied on top; KEY is a dotted path ("process.args",
"linux.resources.memory"), JSON its new value ("-" removes the key).
"""
import json
import os
import sys

BASE = {
    "ociVersion": "1.0.2-dev",
    "process": {
        "terminal": False,
        "user": {"uid": 0, "gid": 0},
        "args": ["sh"],
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "TERM=xterm"],
        "cwd": "/",
        "capabilities": {k: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
                         for k in ("bounding", "effective", "permitted", "ambient")},
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": True,
    },
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "runc",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620",
                     "gid=5"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
    ],
    "linux": {
        "resources": {"devices": [{"allow": False, "access": "rwm"}]},
        "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
        "maskedPaths": ["/proc/acpi", "/proc/kcore", "/sys/firmware"],
        "readonlyPaths": ["/proc/bus", "/proc/sys", "/proc/sysrq-trigger"],
    },
}


def main():
    bundle, rootfs = sys.argv[1], os.path.abspath(sys.argv[2])
    c = json.loads(json.dumps(BASE))
    c["root"] = {"path": rootfs, "readonly": False}
    for kv in sys.argv[3:]:
        key, _, val = kv.partition("=")
        parts = key.split(".")
        node = c
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        if val == "-":
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = json.loads(val)
    os.makedirs(bundle, exist_ok=True)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


if __name__ == "__main__":
    main()
