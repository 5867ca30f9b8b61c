#!/usr/bin/env python3
"""In-place resets of the writable sites (issue 39), mini flavor: what a reset costs when no spare is used, and
whether it grows with the database.

For shopping (Magento: the binary log names the changed tables) and gitlab (PostgreSQL's statistics counters and
the repositories' modification times name what changed), each on an instance of its own:

1. **padded sweep**: the database padded 1x, 10x and 100x with rows in tables no task writes (the padding recipes
   below, run inside the copy), pristine redefined there (``snapshot create SITE golden``), then ``--n`` times a
   small write through the site's own web UI and ``envctl reset SITE --tier inplace``: p50 / p95 of the reset and
   of its in-place phase, the ratio to 1x (goal: within 1.5x), and a restore of an untouched copy (what it says it
   put back, and its time);
2. **core-seconds per reset**, in the same run, after the same write: the in-place tier (the copy's CPU during the
   restore plus envctl's) against a spare swap with its refill (the flip, then the boot of a new spare: its
   containers' CPU and envctl's, measured until the spare is ready again). CPU is read from the containers'
   cgroups (cpuacct) and this process's own usage (the refill runs here: ``refill=False`` then ``replenish``).

    python bench/inplace.py [--n 5] [--sites shopping,gitlab] [--pads 1,10,100]

Prints only; asserts nothing. Instances bip-<site>, port offsets 48100 / 48300 (gone at the end).
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import pct  # noqa: E402
from envctl.lab import Lab  # noqa: E402

OFFSETS = {"shopping": 48100, "gitlab": 48300}
# Padding: rows in tables no task writes, no trigger follows and no fingerprint covers, in SQL run as the database's
# own superuser inside the copy. {rows} is how many the table holds afterwards (10x: 7,500 rows, ~10 MB beside the
# seeded ~1 MB; 100x: 80,000, ~97 MB).
PAD_MAGENTO = """CREATE TABLE IF NOT EXISTS catalog_product_entity_text (value_id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  attribute_id SMALLINT UNSIGNED NOT NULL DEFAULT 0, store_id SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  entity_id INT UNSIGNED NOT NULL DEFAULT 0, value MEDIUMTEXT,
  UNIQUE KEY catalog_product_entity_text_entity_id_attribute_id_store_id (entity_id, attribute_id, store_id)) ENGINE=InnoDB;
INSERT IGNORE INTO catalog_product_entity_text (attribute_id, store_id, entity_id, value)
SELECT 75, 0, 1000000 + s.n, CONCAT('padding ', s.n, ' ', REPEAT(MD5(s.n), 32)) FROM (SELECT a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d AS n
  FROM (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a
  CROSS JOIN (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b
  CROSS JOIN (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c
  CROSS JOIN (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e
  CROSS JOIN (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) f) s
 WHERE s.n < {rows};"""
PAD_ROWS = {"shopping": {1: 0, 10: 7500, 100: 80000}, "gitlab": {1: 0, 10: 10, 100: 100}}


def pad_argv(site: str, pad: int) -> list[str] | None:
    """The command that pads ``site``'s database ``pad``x inside its copy (None: nothing to add)."""
    rows = PAD_ROWS.get(site, {}).get(pad, 0)
    if not rows:
        return None
    if site == "shopping":
        return ["mysql", "-uroot", "magentodb", "-e", PAD_MAGENTO.format(rows=rows)]
    # the mini GitLab's own padding helper: K-1 copies of the seeded rows (users, projects, issues, notes, ...) and a
    # repository per new project, in a private group no task reads or writes
    return ["env", f"K={rows}", "envctl-pad"]


# -- a write through each site's web UI ------------------------------------------------------------------------------
def write(lab: Lab, site: str) -> None:
    base = lab.env("webarena")["SHOPPING" if site == "shopping" else "GITLAB"]
    s = requests.Session()
    if site == "shopping":  # a signed-in customer adds a product to her wish list
        s.post(f"{base}/customer/account/loginPost/", data={"login[username]": "emma.lopez@gmail.com",
                                                             "login[password]": "Password.123"}, timeout=30)
        r = s.post(f"{base}/wishlist/index/add/", data={"product": "4"}, timeout=30)
    else:  # byteblaze opens an issue in one of his projects
        s.post(f"{base}/users/sign_in", data={"user[login]": "byteblaze", "user[password]": "hello1234"}, timeout=30)
        r = s.post(f"{base}/byteblaze/a11y-webring.club/-/issues",
                   data={"issue[title]": f"bench {uuid.uuid4().hex[:6]}", "issue[description]": "bench"}, timeout=30)
    if r.status_code >= 400:
        raise SystemExit(f"the bench's write on {site} failed: HTTP {r.status_code} {r.text[:200]}")


# -- CPU --------------------------------------------------------------------------------------------------------------
def containers(instance: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"label=envctl.instance={instance}"],
                         capture_output=True, text=True).stdout.split()
    return out


def container_cpu(ids: list[str]) -> float:
    """Core-seconds the containers have used (cgroup v1 cpuacct; 0 for one gone)."""
    total = 0
    for cid in ids:
        for root in (Path("/sys/fs/cgroup/cpuacct/docker"), Path("/sys/fs/cgroup/cpu,cpuacct/docker")):
            f = root / cid / "cpuacct.usage"
            if f.is_file():
                total += int(f.read_text())
                break
    return total / 1e9


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def core_seconds(lab: Lab, site: str, fn: object) -> tuple[float, float]:
    """(core-seconds, wall seconds) of ``fn()``: this process's CPU plus every container of the instance's, the
    containers that exist at the end included (a new spare)."""
    before_ids = containers(lab.instance)
    c0, p0, t0 = {i: container_cpu([i]) for i in before_ids}, own_cpu(), time.monotonic()
    fn()  # type: ignore[operator]
    wall = time.monotonic() - t0
    after_ids = containers(lab.instance)
    used = own_cpu() - p0 + sum(container_cpu([i]) - c0.get(i, 0.0) for i in after_ids)
    return used, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--sites", default="shopping,gitlab")
    ap.add_argument("--pads", default="1,10,100")
    args = ap.parse_args()
    pads = [int(p) for p in args.pads.split(",")]
    print(f"{'site':<10}{'pad':>5}{'reset p50':>11}{'p95':>8}{'in place p50':>14}{'vs 1x':>7}{'untouched':>11}  restored")
    cost_rows = []
    for site in args.sites.split(","):
        lab = Lab(instance=f"bip-{site}")
        try:
            up = lab.up([site], flavor="mini", port_offset=OFFSETS[site], spares=1, login=False)
            if not up.ok:
                raise SystemExit(f"up {site} failed: " + "; ".join(s.error for s in up.sites if not s.ok))
            base50 = None
            for pad in pads:
                argv = pad_argv(site, pad)
                if argv:
                    rc, out = lab.exec(site, argv)
                    if rc != 0:
                        raise SystemExit(f"padding {site} {pad}x failed: {out[-300:]}")
                    lab.snapshot_create(site, "golden")  # pristine is the padded state now
                took, phase, said = [], [], ""
                for _ in range(args.n):
                    write(lab, site)
                    [r] = lab.reset([site], tier="inplace", refill=False)
                    took.append(r.seconds)
                    phase.append(r.phases.get("inplace", 0.0))
                    said = r.restored or said
                [u] = lab.reset([site], tier="inplace", refill=False)
                base50 = base50 or pct(took, 50)
                print(f"{site:<10}{pad:>4}x{pct(took, 50):>10.2f}s{pct(took, 95):>7.2f}s{pct(phase, 50):>13.2f}s"
                      f"{pct(took, 50) / base50:>6.2f}x{u.seconds:>10.2f}s  after a write: {said[:70]!r}; untouched "
                      f"(but for the previous reset's own login): {u.restored[:60]!r}")
            # core-seconds: in place vs a spare swap and its refill, after the same write
            write(lab, site)
            ip, ip_wall = core_seconds(lab, site, lambda: lab.reset([site], tier="inplace", refill=False))
            lab.replenish(site, 1)  # a spare ready
            write(lab, site)
            sp, sp_wall = core_seconds(lab, site, lambda: (lab.reset([site], tier="spare", refill=False),
                                                            lab.replenish(site, 1)))
            cost_rows.append((site, ip, ip_wall, sp, sp_wall))
        finally:
            lab.down(volumes=True)
    print("\ncore-seconds per reset after one write (this process + the instance's containers):")
    for site, ip, ip_wall, sp, sp_wall in cost_rows:
        print(f"{site:<10} in place {ip:.2f} core-s ({ip_wall:.2f}s wall); spare swap + refill {sp:.2f} core-s "
              f"({sp_wall:.2f}s wall until the spare is back): {sp / ip if ip else float('nan'):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
