"""envctl cloud: machines for a lab, joined into one swarm."""
from __future__ import annotations


import click
from dataclasses import asdict

from envctl.cli.core import (exit_unless, check_region, cli, flavor_option,
                             json_option)


# -- cloud lab -------------------------------------------------------------------------------------
@cli.group()
def cloud() -> None:
    """A lab of many machines: EC2 (boto3) or your SSH machines, joined into one Docker Swarm by Ansible."""


@cloud.command("up")
@click.option("--lab", required=True, help="lab name (tags every resource)")
@click.option("--hosts", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--region", default=None, envvar="AWS_REGION", callback=check_region, help="AWS region (AWS_REGION)")
@click.option("--instance-type", default="t3a.xlarge", show_default=True)
@click.option("--ami", default="ubuntu", show_default=True, help="ubuntu | webarena | an AMI id")
@click.option("--allow-cidr", "allow_cidrs", multiple=True,
              help="CIDR allowed to reach SSH, the sites and the registry (repeat)")
@click.option("--allow-world", is_flag=True, help="allow CIDRs that together cover all of IPv4/IPv6 (refused otherwise)")
@click.option("--key-name", default=None, help="use your EC2 key pair instead of creating one")
@click.option("--spot", is_flag=True)
@click.option("--ttl", default="8h", show_default=True, help="machines terminate themselves after this")
@click.option("--sites", default="all", show_default=True, help="comma-separated sites, or all (ports and disk)")
@flavor_option
@click.option("--instances", type=click.IntRange(1, 64), default=1, show_default=True,
              help="pool members the lab will serve ('envctl serve --instances N'): their ports are opened")
@click.option("--inventory", "inventory_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="join these SSH machines (Ansible INI/YAML inventory) instead of creating EC2 machines")
@click.option("--registry", default="", help="a registry every node pulls from (host:port) [one on the manager]")
@json_option
def cloud_up(lab: str, hosts: int, region: str | None, instance_type: str, ami: str, allow_cidrs: tuple[str, ...],
             allow_world: bool, key_name: str | None, spot: bool, ttl: str, sites: str, flavor: str | None,
             instances: int, inventory_file: str | None, registry: str, as_json: bool) -> None:
    """Create the machines (or take --inventory) and join them into one swarm; 'envctl cloud env' then points envctl
    at it (up, reset, snapshot, serve --instances N: the same commands, on every node)."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json, err_console

    manifest, play = cloudlab.up(lab, hosts=hosts, region=region, instance_type=instance_type, ami=ami,
                                 allow_cidrs=allow_cidrs, allow_world=allow_world, key_name=key_name, spot=spot,
                                 ttl=ttl, sites=sites, flavor=flavor or "mini", instances=instances,
                                 inventory_file=inventory_file, registry=registry,
                                 progress=(lambda m: None) if as_json else (lambda m: err_console.print(m)))
    failures = play.failures if play else []
    if as_json:
        emit_json({"lab": lab, "manifest": asdict(manifest), "failures": [asdict(f) for f in failures],
                   "env": manifest.environment() if manifest.manager else {}})
    else:
        for f in failures:
            click.echo(f"error: machine {f.host} failed at task '{f.task}': {f.output[-300:]}", err=True)
        click.echo(f"lab '{lab}': {len(manifest.machines) - len(failures)} of {len(manifest.machines)} machines in the "
                   f"swarm (manager {manifest.manager}, registry {manifest.registry}); point envctl at it with: "
                   f"eval \"$(envctl cloud env --lab {lab})\"")
    exit_unless(not failures)


@cloud.command("status")
@click.option("--lab", required=True)
@json_option
def cloud_status(lab: str, as_json: bool) -> None:
    """The machines (EC2: state, TTL left, cost so far) and the swarm's nodes as its manager sees them."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json, table

    st = cloudlab.status(lab)
    if as_json:
        emit_json(asdict(st))
    else:
        cost = f"${st.total_cost_usd:.2f} so far (prices: {st.price_snapshot})" if st.total_cost_usd is not None else ""
        table(f"lab {lab} ({st.kind}) {cost}", ["machine", "address", "state", "type", "ttl left", "cost"],
              [[m.name, m.address, m.state, m.instance_type or "", "-" if m.time_left_minutes is None else
                f"{m.time_left_minutes} min", "-" if m.cost_usd is None else f"${m.cost_usd:.2f}"] for m in st.machines])
        table("swarm nodes", ["node", "address", "role", "state", "availability", "engine"],
              [[n.hostname, n.address, n.role, n.state, n.availability, n.engine] for n in st.nodes])
        if st.error:
            click.echo(f"error: {st.error}", err=True)
    exit_unless(not st.error and bool(st.nodes) and all(n.state == "ready" for n in st.nodes))


@cloud.command("env")
@click.option("--lab", required=True)
@json_option
def cloud_env(lab: str, as_json: bool) -> None:
    """The variables that point envctl at the lab's swarm (shell exports; --json: an object)."""
    import shlex

    from envctl import cloud as cloudlab
    from envctl.render import emit_json

    values = cloudlab.env(lab)
    if as_json:
        return emit_json(values)
    for k, v in values.items():
        click.echo(f"export {k}={shlex.quote(v)}")


@cloud.command("down")
@click.option("--lab", required=True)
@click.option("--region", default=None, envvar="AWS_REGION", callback=check_region)
@json_option
def cloud_down(lab: str, region: str | None, as_json: bool) -> None:
    """Remove what envctl made for the lab (EC2: instances, group, key pair; an inventory's machines are left alone)."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json

    teardown = cloudlab.down(lab, region=region, progress=lambda m: click.echo(m, err=True))
    if as_json:
        emit_json({"lab": lab, "teardown": asdict(teardown) if teardown is not None else None})
