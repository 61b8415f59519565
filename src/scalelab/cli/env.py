"""``scalelab env``: versions, device and threads, for bug reports."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("env", help="print versions, device and threads (for bug reports)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from scalelab.cli._common import console
    from scalelab.environment import collect_environment

    env = collect_environment(args.device)
    if args.json:
        print(json.dumps(env, indent=2))
    else:
        width = max(map(len, env))
        for k, v in env.items():
            console.print(f"{k:<{width}}  {v}", highlight=False)
    return 0
