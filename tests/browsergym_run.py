"""Run one task of BrowserGym's webarena_verified environment (PyPI, unmodified) and print its reward.

Run by tests/test_browsergym_verified.py with a Python >= 3.12 venv that has browsergym-webarena-verified;
the WA_* variables (and PW_EXTRA_HEADERS, when set) come from 'envctl env --format browsergym'.

argv: TASK_ID ACTIONS_JSON. An action 'fill@NAME@TEXT' or 'click@NAME' is turned into BrowserGym's action on
the element whose accessible name is NAME in the current AX tree (its bid); others are passed as they are.
Prints one line: RESULT {"reward": R} or RESULT {"error": "..."}.
"""
import json
import re
import sys

import browsergym.webarena_verified  # noqa: F401 - registers the tasks
import gymnasium as gym
from browsergym.utils.obs import flatten_axtree_to_str
from importlib import resources


def bid(obs, name):
    tree = flatten_axtree_to_str(obs["axtree_object"])
    m = re.search(r"\[(\w+)\] \w+ '" + re.escape(name) + "'", tree)
    if not m:
        raise LookupError(f"no element named {name!r}")
    return m.group(1)


def main() -> None:
    tid, actions = int(sys.argv[1]), json.loads(sys.argv[2])
    dataset = json.loads(resources.files("webarena_verified").joinpath("assets/dataset/webarena-verified.json").read_text())
    task = next(t for t in dataset if t["task_id"] == tid)
    env = gym.make(f"browsergym/webarena_verified.{task['intent_template_id']}.{tid}.{task['revision']}", headless=True,
                   pw_chromium_kwargs={"executable_path": "/usr/bin/chromium", "chromium_sandbox": False})
    reward = 0.0
    try:
        obs, _ = env.reset(seed=0)
        for a in actions:
            if a.startswith("fill@"):
                _, name, text = a.split("@", 2)
                a = f"fill({bid(obs, name)!r}, {text!r})"
            elif a.startswith("click@"):
                a = f"click({bid(obs, a.split('@', 1)[1])!r})"
            obs, reward, _, _, _ = env.step(a)
        print("RESULT " + json.dumps({"reward": reward}))
    except Exception as exc:  # what failed, for the test to read
        print("RESULT " + json.dumps({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}))
    finally:
        env.close()


if __name__ == "__main__":
    main()
