"""envctl sites, doctor and plan: what the catalog says and what this machine has."""
from __future__ import annotations


import click

from envctl.cli.core import (Ctx, exit_unless, named_sites, cli, flavor_option,
                             json_option, pass_ctx, sites_argument)
from envctl.errors import EnvctlError, UsageError


# -- sites ---------------------------------------------------------------------------------------
@cli.group()
def sites() -> None:
    """What the catalog knows about each site."""


@sites.command("list")
@json_option
@pass_ctx
def sites_list(ctx: Ctx, as_json: bool) -> None:
    """Every site with its ports, flavors, benchmarks and reset tier."""
    from envctl.render import emit_json, table

    rows = ctx.catalog.summary()
    if as_json:
        return emit_json(rows)
    table(None, ["site", "title", "ports", "flavors", "benchmarks", "reset", "login"],
          [[r["site"], r["title"], ", ".join(f"{k}:{v}" if len(r["ports"]) > 1 else str(v) for k, v in r["ports"].items()),
            ",".join(r["flavors"]), ",".join(r["benchmarks"]), r["reset"], r["login"] or "-"] for r in rows])


@sites.command("show")
@click.argument("site")
@json_option
@pass_ctx
def sites_show(ctx: Ctx, site: str, as_json: bool) -> None:
    """Everything the catalog knows about SITE (passwords and secrets masked)."""
    import yaml

    from envctl.render import console, emit_json

    from envctl.catalog import describe

    data = describe(ctx.catalog, site)
    if as_json:
        return emit_json(data)
    console.print(yaml.safe_dump({site: data}, sort_keys=False, width=110))


# -- doctor --------------------------------------------------------------------------------------
@cli.command()
@sites_argument
@flavor_option
@click.option("--port-offset", type=click.IntRange(0, 60000), default=0)
@click.option("--bind", default="127.0.0.1", show_default=True)
@json_option
@pass_ctx
def doctor(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, port_offset: int, bind: str,
           as_json: bool) -> None:
    """Check this machine for 'envctl up': engine, storage driver, disk, RAM, ports, images, browser."""
    from envctl.doctor import run_doctor
    from envctl.render import emit_json, table
    from envctl.validate import validate_host, validate_port_offset

    names = named_sites(ctx, site_names)
    validate_host(bind, "--bind")
    validate_port_offset(port_offset, [p for n in ctx.catalog.resolve(names) for p in ctx.catalog.site(n).public_ports().values()])
    report = run_doctor(ctx.catalog, names, flavor=flavor or "full", port_offset=port_offset,
                        bind=bind)
    if as_json:
        emit_json(report)
    else:
        table(None, ["check", "status", "detail", "fix"],
              [[c["check"], {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}[c["status"]],
                c["detail"], c.get("fix") or ""] for c in report["checks"]])
    exit_unless(report["ok"])


# -- plan ----------------------------------------------------------------------------------------
@cli.command("plan")
@sites_argument
@flavor_option
@click.option("--memory", "memory", default=None, help="plan for a host with this much memory (e.g. 64g) [this host]")
@json_option
@pass_ctx
def plan_cmd(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, memory: str | None, as_json: bool) -> None:
    """How many pristine spares per site fit this host (what 'envctl up' boots by default)."""
    from envctl.plan import plan
    from envctl.render import emit_json, table
    from envctl.validate import validate_memory_size

    flavor = flavor or "full"
    if flavor not in ctx.catalog.flavors():
        raise UsageError(f"unknown flavor '{flavor}'", f"choose one of {', '.join(ctx.catalog.flavors())}")
    host_bytes = validate_memory_size(memory, "--memory") if memory is not None else None  # 0, -1g, inf: one line
    names = [n for n in ctx.catalog.resolve(list(site_names), all_sites=not site_names)
             if flavor in ctx.catalog.site(n).flavors]
    from envctl.lab import engine_memory

    try:  # what running copies of these sites really use on this engine (a copy is counted by it)
        engine = engine_memory()
        measured = engine.site_use(flavor)
    except EnvctlError:
        engine, measured = None, {}
    p = plan(ctx.catalog, names, flavor, host_bytes, measured=measured)
    if as_json:
        emit_json({**p.to_dict(), "applied_by_up": True,
                   "engine_used_bytes": engine.used_bytes if engine else None})
        return
    gb = lambda n: f"{n / (1 << 30):.1f} GiB"  # noqa: E731
    mb = lambda n: f"{n / (1 << 20):.0f} MiB" if n is not None else "-"  # noqa: E731
    table(f"{flavor} flavor on {gb(p.host_bytes)} (budget {gb(p.budget_bytes)}, planned {gb(p.used_bytes)})",
          ["site", "copy limit", "measured", f"counted (x{p.margin:g})", "spares wanted", "spares that fit"],
          [[s.site, gb(s.copy_bytes), mb(s.measured_bytes), mb(s.counted_bytes), s.wanted, s.spares]
           for s in p.sites])
    if not p.fits:
        click.echo("the active copies alone exceed the budget: start fewer sites at once, or use a larger host")
    click.echo("measured: the largest running active copy of the site on this engine (none: counted by its limits)"
               + (f"; the engine's containers use {gb(engine.used_bytes)} now" if engine else
                  "; the engine could not be read"))
    click.echo("'envctl up' also counts what other instances on the engine use (measured the same way)")
    click.echo("'envctl up' boots these spares by default ('--spares K' asks for K per site instead)")
    with_spares, in_place = p.instances()
    click.echo(f"instances of these sites that fit the budget: {with_spares} with these spares ({gb(p.used_bytes)} "
               f"each), {in_place} resetting in place only ('up --spares 0': {gb(p.in_place_bytes)} each)")


