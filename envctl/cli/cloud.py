"""envctl cloud: machines for a lab, joined into one swarm."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import click
from dataclasses import asdict

from envctl.cli.core import (Ctx, _exit_unless, _finite, _check_region, _sites, auth_dir_option, cli, flavor_option,
                             instance_option, json_option, pass_ctx, sites_argument)
from envctl.errors import EnvctlError, UsageError


# -- cloud lab -------------------------------------------------------------------------------------
@cli.group()
def cloud() -> None:
    """A lab of EC2 hosts (boto3) or SSH hosts, configured by Ansible, each running envctl."""


@cloud.command("up")
@click.option("--lab", required=True, help="lab name (tags every resource)")
@click.option("--hosts", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--region", default=None, envvar="AWS_REGION", callback=_check_region, help="AWS region (AWS_REGION)")
@click.option("--instance-type", default="t3a.xlarge", show_default=True)
@click.option("--ami", default="webarena", show_default=True, help="webarena | ubuntu | an AMI id")
@click.option("--allow-cidr", "allow_cidrs", multiple=True, help="CIDR allowed to reach SSH and the sites (repeat)")
@click.option("--allow-world", is_flag=True, help="allow CIDRs that together cover all of IPv4/IPv6 (refused otherwise)")
@click.option("--key-name", default=None, help="use your EC2 key pair instead of creating one")
@click.option("--spot", is_flag=True)
@click.option("--ttl", default="8h", show_default=True, help="hosts terminate themselves after this")
@click.option("--sites", default="all", show_default=True, help="comma-separated sites, or all")
@flavor_option
@click.option("--inventory", "inventory_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="configure these SSH hosts (Ansible INI/YAML inventory) instead of creating EC2 hosts")
@click.option("--images-url", default="",
              help="the lab's S3/HTTP copy of the artifacts (URL/<artifact name>): the hosts' 'images get' tries it first")
@click.option("--instances-per-host", "instances", type=click.IntRange(1, 64), default=1, show_default=True,
              help="isolated instances on each host (distinct port offsets)")
@json_option
def cloud_up(lab: str, hosts: int, region: str | None, instance_type: str, ami: str, allow_cidrs: tuple[str, ...],
             allow_world: bool, key_name: str | None, spot: bool, ttl: str, sites: str, flavor: str | None,
             inventory_file: str | None, images_url: str, instances: int, as_json: bool) -> None:
    """Create the hosts (or take --inventory), prepare them with Ansible, run envctl up + serve on each."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json, err_console

    manifest, play = cloudlab.up(lab, hosts=hosts, region=region, instance_type=instance_type, ami=ami,
                                 allow_cidrs=allow_cidrs, allow_world=allow_world, key_name=key_name, spot=spot,
                                 ttl=ttl, sites=sites, flavor=flavor or "full", inventory_file=inventory_file,
                                 images_url=images_url, instances_per_host=instances,
                                 progress=(lambda m: None) if as_json else (lambda m: err_console.print(m)))
    failures = play.failures if play else []
    if as_json:
        emit_json({"lab": lab, "manifest": asdict(manifest), "failures": [asdict(f) for f in failures]})
    else:
        for f in failures:
            click.echo(f"error: host {f.host} failed at task '{f.task}': {f.output[-300:]}", err=True)
        click.echo(f"lab '{lab}': {len(manifest.hosts) - len(failures)} of {len(manifest.hosts)} hosts ready")
    _exit_unless(not failures)


@cloud.command("status")
@click.option("--lab", required=True)
@json_option
def cloud_status(lab: str, as_json: bool) -> None:
    """Hosts, state, health, TTL left and cost so far."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json, table

    st = cloudlab.status(lab)
    if as_json:
        emit_json(asdict(st))
    elif st.kind == "ec2":
        cost = f"${st.total_cost_usd:.2f} so far" if st.total_cost_usd is not None else "cost unknown"
        table(f"lab {lab}: {cost} (prices: {st.price_snapshot})",
              ["host", "address", "state", "type", "ready", "ttl left", "cost", "error"],
              [[h.name, h.address, h.state, h.instance_type, "yes" if h.ready else "no",
                f"{h.time_left_minutes:.0f} min" if h.time_left_minutes is not None else "-",
                f"${h.cost_usd:.2f}" if h.cost_usd is not None else "-", h.error or ""] for h in st.hosts])
    else:
        rows = []
        for h in st.hosts:
            shown: list[cloudlab.InstanceHealth | None] = list(h.instances) or [None]
            for i in shown:
                rows.append([h.name, h.address, "yes" if h.reachable else "NO", i.instance if i else "-",
                             ", ".join(i.sites_up) or "-" if i else "-", ", ".join(i.sites_down) if i else "",
                             "-" if i is None or i.ready is None else "yes" if i.ready else "no",
                             (i.error if i and i.error else h.error or "")[:80]])
        table(f"lab {lab} ({len(st.hosts)} hosts)",
              ["host", "address", "reachable", "instance", "sites up", "sites down", "ready", "error"], rows)
    # exit 1 unless every host is reachable (or running on EC2) and every instance's sites are up
    _exit_unless(all((h.reachable if h.reachable is not None else h.state == "running")
                     and all(i.running and not i.sites_down for i in h.instances) for h in st.hosts))


@cloud.command("env")
@click.option("--lab", required=True)
@click.option("--format", "fmt", type=click.Choice(["json", "browsergym", "agentlab"]), default="json", show_default=True)
@json_option
def cloud_env(lab: str, fmt: str, as_json: bool) -> None:
    """One URL set per host, for parallel workers (always JSON)."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json

    emit_json(cloudlab.env(lab, fmt))


@cloud.command("down")
@click.option("--lab", required=True)
@click.option("--region", default=None, envvar="AWS_REGION", callback=_check_region)
@json_option
def cloud_down(lab: str, region: str | None, as_json: bool) -> None:
    """Terminate everything tagged with the lab; delete the group and key pair it created. Nothing else."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json

    teardown = cloudlab.down(lab, region=region, progress=lambda m: click.echo(m, err=True))
    if as_json:
        emit_json({"lab": lab, "teardown": asdict(teardown) if teardown is not None else None})
