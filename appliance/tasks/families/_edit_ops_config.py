"""The edit family's operations on configuration (table rows, see _ops.py): one value of an ini, YAML or JSON
file changes, every other line stays as it was."""

from __future__ import annotations

import json
import re

from appliance.tasks.families._common import WORDS
from appliance.tasks.families._kinds import one_line, sed_edit
from appliance.tasks.families._ops import Case, Ctx, op, q, text_of


@op("edit", "edit-ini-value", (1, 2, 3), "GNU sed: s/// on one line of a sectioned ini file", "sed -i", [
    "In {src}, {what} is {old}; it should be {new}. Change only that.",
    "Heads-up from the infra channel: {what} in {src} still says {old}, but since the move it has to be {new}. "
    "Could you fix that value? Please leave the rest of the file (comments and all) exactly as it is.",
    "{src}: {what} shoud be {new} not {old}, pls fix",
    "From now on, {what} in {src} must read {new} (it is {old}); nothing else in the file may change.",
])
def _ini(c: Ctx) -> Case:
    src = c.src("ini", ["app", "deploy", "service", "staging"])
    nums = c.pick(list(range(1100, 9900, 101)), 4)
    sections = [("server", [("host", "0.0.0.0"), ("port", str(nums[0])), ("workers", str(c.rng.randint(2, 9)))]),
                ("metrics", [("enabled", c.pick(["true", "false"])), ("port", str(nums[1]))]),
                ("database", [("host", c.pick(["db.internal", "10.0.3.7"])), ("port", str(nums[2])),
                              ("pool_size", str(c.rng.randint(11, 40)))])]
    lines = [f"; {c.pick(WORDS)} service - deployed by the platform team",
             f"; last reviewed {c.pick(['March', 'May', 'June'])}"]
    for sec, kvs in sections:
        lines += ["", f"[{sec}]"] + [f"{k} = {v}" for k, v in kvs]
        if sec == "server":
            lines.append(f";port = {c.rng.randint(80, 90)}  (the old one)")
    sec, key, what = c.pick([("server", "port", "the web server's port"), ("metrics", "port", "the metrics port"),
                             ("database", "port", "the database port"),
                             ("database", "pool_size", "the database pool size"),
                             ("server", "workers", "the number of server workers")])
    old = dict(dict(sections)[sec])[key]
    new = str(nums[3] if key == "port" else int(old) * 2)
    idx = lines.index(f"[{sec}]") + 1 + [k for k, _ in dict(sections)[sec]].index(key)
    verify = one_line(src, text_of(lines), idx, rf"{key}\s*=\s*{new}\s*", f"{what} should be {new}")
    return Case({src: text_of(lines)}, verify,
                f"sed -i '/^\\[{sec}\\]/,/^\\[/ s/^{key} = {old}$/{key} = {new}/' {q(src)}",
                dict(src=src, what=what, old=old, new=new))


@op("edit", "edit-yaml-value", (2, 3, 4), "GNU sed: s/// on one value of a YAML file", "sed -i", [
    "Set {what} in {src} to {new} (it is {old} now). Touch nothing else.",
    "We're about to deploy and noticed {src} still has {what} at {old}. It needs to be {new}. Can you change "
    "just that? The file is reviewed line by line, so no reformatting please.",
    "{what} in {src} -> {new} (currently {old}), leave evrything else alone",
    "{src} should say {new} for {what}, with every other line exactly as before.",
])
def _yaml(c: Ctx) -> Case:
    src = c.src("yaml", ["web", "deploy", "service", "values"])
    svc, tag, port = (c.pick(["web", "api", "shop", "worker"]), f"1.{c.rng.randint(0, 9)}.{c.rng.randint(0, 9)}",
                      c.rng.randint(8000, 8099))
    reps, mem = c.rng.randint(1, 4), c.pick([128, 256, 384])
    lines = [f"# {svc} service - managed by the platform team", f"service: {svc}", f"image: registry.local/{svc}:{tag}",
             f"replicas: {reps}", "resources:", "  cpu: 500m", f"  memory: {mem}Mi", "env:", "  LOG_LEVEL: info",
             f"  API_URL: http://api.internal:{port}", "healthcheck:", "  path: /healthz", f"  port: {port}"]
    major, minor, patch = tag.split(".")
    choices = [("the image tag", 2, f"image: registry.local/{svc}:{major}.{minor}.{int(patch) + 1}", tag,
                f"{major}.{minor}.{int(patch) + 1}"),
               ("the number of replicas", 3, f"replicas: {reps + 2}", str(reps), str(reps + 2)),
               ("the memory limit", 6, f"  memory: {mem * 2}Mi", f"{mem}Mi", f"{mem * 2}Mi"),
               ("the log level", 8, "  LOG_LEVEL: warn", "info", "warn"),
               ("the health check's port", 12, f"  port: {port + 1000}", str(port), str(port + 1000))]
    what, idx, new_line, old, new = c.pick(choices)
    key, _, value = new_line.partition(": ")
    verify = one_line(src, text_of(lines), idx, re.escape(key) + r":\s*" + re.escape(value) + r"\s*",
                      f"{what} should be {new}")
    return Case({src: text_of(lines)}, verify, sed_edit(text_of(lines), idx, new_line, src),
                dict(src=src, what=what, old=old, new=new))


@op("edit", "edit-json-value", (2, 3, 4), "GNU sed on one line of a JSON file (or jq, keeping its layout)", "sed -i", [
    "Change {what} in {src} from {old} to {new}; keep the rest of the file as it is.",
    "Small config fix: {src} has {what} set to {old}, which is why {symptom}. It should be {new}. Could you "
    "change only that value? Keep the formatting, other people diff this file.",
    "{src} - {what} needs to be {new} insted of {old}",
    "In {src}, {what} should become {new} (from {old}); every other line stays byte for byte.",
])
def _json(c: Ctx) -> Case:
    src = c.src("json", ["settings", "config", "app"])
    data = {"name": c.pick(WORDS), "version": f"2.{c.rng.randint(0, 9)}.{c.rng.randint(0, 9)}",
            "server": {"host": "0.0.0.0", "port": c.rng.randint(3000, 3999)},
            "features": {"dark_mode": c.rng.random() < 0.5, "beta_signup": True},
            "retries": c.rng.randint(1, 3), "tags": c.pick(["prod", "eu", "web", "blue"], 2)}
    pick = c.pick([("the server port", ["server", "port"], data["server"]["port"] + 1000, "nothing can connect"),
                   ("the retry count", ["retries"], data["retries"] + 3, "jobs give up too early"),
                   ("the beta signup switch", ["features", "beta_signup"], False, "strangers can sign up for the beta"),
                   ("the version", ["version"], data["version"][:-1] + str(int(data["version"][-1]) + 1),
                    "the release is labelled wrong")])
    what, path, new_value, symptom = pick
    want = json.loads(json.dumps(data))
    node = want
    for k in path[:-1]:
        node = node[k]
    old_value = node[path[-1]]
    node[path[-1]] = new_value
    before, after = json.dumps(data, indent=2) + "\n", json.dumps(want, indent=2) + "\n"
    idx = next(i for i, (x, y) in enumerate(zip(before.split("\n"), after.split("\n"), strict=True)) if x != y)
    new_line = after.split("\n")[idx]
    indent, _, rest = new_line.partition(f'"{path[-1]}": ')
    pattern = re.escape(f'{indent}"{path[-1]}":') + r"\s*" + re.escape(rest) + r"\s*"
    verify = (one_line(src, before, idx, pattern, f"{what} should be {json.dumps(new_value)}") + "\n"
              f"try:\n    _data = json.loads(read({src!r}) or '')\nexcept ValueError as e:\n"
              "    _data = 'not JSON: ' + str(e)\n"
              f"check(_data == {want!r}, {src!r} + ' should parse to ' + repr({want!r})[:300]"
              " + ', parses to ' + repr(_data)[:300])")
    return Case({src: before}, verify, sed_edit(before, idx, new_line, src),
                dict(src=src, what=what, old=json.dumps(old_value), new=json.dumps(new_value), symptom=symptom))
