"""envctl up, down, status, health, env, instances, logs, exec, login."""
from __future__ import annotations

import sys
import time

import click

from envctl.cli.core import (Ctx, exit_unless, named_sites, auth_dir_option, cli, flavor_option,
                             instance_option, json_option, pass_ctx, sites_argument)
from envctl.cli.serving import pool_leases, show_pool
from envctl.errors import EnvctlError


# -- lifecycle -----------------------------------------------------------------------------------
@cli.command()
@sites_argument
@click.option("--all", "all_sites", is_flag=True,
              help="every site of the catalog (the default for a new instance; an existing one: the sites it has)")
@flavor_option
@instance_option
@click.option("--public-host", default=None, help="host name the browser and harness use [127.0.0.1]")
@click.option("--bind", default=None, help="address the public ports bind to [127.0.0.1]")
@click.option("--port-offset", type=click.IntRange(0, 60000), default=None, help="add N to every public port [0]")
@click.option("--no-wait", is_flag=True, help="do not wait for health probes")
@click.option("--login/--no-login", default=True, show_default=True, help="seed login state files when healthy")
@auth_dir_option
@click.option("--spares", type=click.IntRange(0, 8), default=None,
              help="pre-boot K pristine spares per site for ~1 s resets (booted in the background)")
@json_option
@pass_ctx
def up(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, flavor: str | None, instance: str,
       public_host: str | None, bind: str | None, port_offset: int | None, no_wait: bool, login: bool,
       auth_dir: str | None, spares: int | None, as_json: bool) -> None:
    """Start sites (all by default; on an existing instance, the sites it has), configure them and wait until every
    one is healthy. On an instance that exists, 'up' checks and repairs: after a reboot it brings back what was there."""
    from envctl.render import SiteProgress, emit_json, table

    if site_names and all_sites:
        raise click.UsageError("name sites or pass --all, not both")
    lab = ctx.lab(instance, auth_dir)
    with SiteProgress(json_events=as_json) as progress:
        result = lab.up(list(site_names), all_sites=all_sites, flavor=flavor,
                        public_host=public_host, bind=bind, port_offset=port_offset, wait=not no_wait, login=login,
                        spares=spares, progress=progress)
    if as_json:
        emit_json(result.to_dict())
    else:
        table(f"instance {result.instance} ({result.flavor}) in {result.seconds:.1f}s",
              ["site", "url", "state", "create", "boot", "configure", "healthy"],
              [[s.site, s.url, "[green]healthy[/]" if s.ok else f"[red]{s.action}[/]",
                *(f"{s.timings[k]:.1f}s" if k in s.timings else "-" for k in ("create", "boot", "configure", "healthy"))]
               for s in result.sites])
        for s in result.sites:
            if not s.ok:
                click.echo(f"error: {s.site}: {s.error}", err=True)
        if result.login_error:
            click.echo(f"error: login state: {result.login_error}", err=True)
        elif result.login_files:
            click.echo(f"login state: {len(result.login_files)} files in {lab.auth_dir}/", err=True)
        if result.spares:
            click.echo("spares (booting in the background): "
                       + ", ".join(f"{n} {k}" for n, k in result.spares.items()), err=True)
        for why in result.spares_short.values():  # the capacity plan gave a site fewer than it wants
            click.echo(f"fewer spares: {why}", err=True)
    exit_unless(result.ok)


@cli.command()
@sites_argument
@instance_option
@click.option("--all", "all_instances", is_flag=True,
              help="every instance on this engine (those 'envctl instances' lists); no prompt: --all is the consent")
@click.option("--match", "pattern", default=None, callback=lambda _c, _p, v: _check_pattern(v),
              help="with --all: only instances whose name matches this glob (e.g. 'P-*')")
@click.option("--dry-run", is_flag=True, help="with --all: list the instances it would remove, remove nothing")
@click.option("--volumes", is_flag=True, help="also remove the instance's named volumes")
@json_option
@pass_ctx
def down(ctx: Ctx, site_names: tuple[str, ...], instance: str, all_instances: bool, pattern: str | None,
         dry_run: bool, volumes: bool, as_json: bool) -> None:
    """Stop and remove what envctl made for the instance (only that, found by label); --all: every instance."""
    from envctl.render import emit_json

    if all_instances or pattern is not None or dry_run:
        return _down_all(ctx, site_names, all_instances, pattern, dry_run, volumes, as_json)
    result = ctx.lab(instance).down(named_sites(ctx, site_names), volumes=volumes)
    if as_json:
        return emit_json(result.to_dict())
    click.echo(f"removed {len(result.removed)} containers (services on a swarm) of instance '{instance}'")


def _check_pattern(value: str | None) -> str | None:
    """An instance-name glob: the letters of instance names, '*', '?' and '[...]'."""
    import re

    if value is not None and not re.fullmatch(r"[A-Za-z0-9_*?\[\]!-]{1,80}", value):
        raise click.BadParameter(f"{value[:60]!r} is not a glob of instance names (letters, digits, '-', '_', "
                                 "'*', '?', '[...]')")
    return value


def _down_all(ctx: Ctx, site_names: tuple[str, ...], all_instances: bool, pattern: str | None, dry_run: bool,
              volumes: bool, as_json: bool) -> None:
    """``down --all``: each instance on the engine removed in turn (one failing does not stop the others)."""
    import fnmatch

    from envctl.lab import Lab
    from envctl.render import emit_json

    if not all_instances:
        raise click.UsageError("--match and --dry-run go with --all")
    if site_names:
        raise click.UsageError("--all removes whole instances: name no SITE (or use 'envctl down SITE -i NAME')")
    if click.get_current_context().get_parameter_source("instance") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("give --all or --instance, not both")
    names = [i.instance for i in Lab.instances(ctx.catalog) if fnmatch.fnmatchcase(i.instance, pattern or "*")]
    done, failed = [], {}
    for name in [] if dry_run else names:
        try:
            done.append(ctx.lab(name).down(None, volumes=volumes).to_dict())
        except EnvctlError as exc:
            failed[name] = str(exc)
    if as_json:
        emit_json({"all": True, "match": pattern, "dry_run": dry_run, "instances": names, "removed": done,
                   "failed": failed})
    elif dry_run:
        click.echo("would remove: " + (", ".join(names) if names else "no instance"))
    else:
        for r in done:
            click.echo(f"removed {len(r['removed'])} containers (services on a swarm) of instance '{r['instance']}'")
        for name, why in failed.items():
            click.echo(f"error: instance '{name}': {why}", err=True)
        if not names:
            click.echo("no instance" + (f" matching '{pattern}'" if pattern else "") + " on this engine")
    exit_unless(not failed)


@cli.command()
@instance_option
@json_option
@pass_ctx
def status(ctx: Ctx, instance: str, as_json: bool) -> None:
    """Per site: containers, roles, health (each probe with latency), URL, flavor, image, uptime."""
    from envctl.render import emit_json, table

    pool = pool_leases(instance)
    lab = ctx.lab(instance)
    if pool is not None and lab.settings(quick=True) is None:  # a lease pool's name: its members and their leases
        if as_json:
            return emit_json(pool)
        show_pool(instance, pool)
        return
    st = lab.status()
    if as_json:
        emit_json({**st.to_dict(), **({"pool": pool} if pool is not None else {})})
        exit_unless(st.healthy)
        return
    rows = []
    for s in st.sites:
        probes = " ".join(f"{p['name']}:{'ok' if p['ok'] else 'FAIL'}({p['latency_ms']:.0f}ms)" for p in s.probes)
        active = [c for c in s.containers if c.role == "active"]
        rows.append([s.site, s.url, "[green]healthy[/]" if s.healthy else "[red]unhealthy[/]", probes,
                     active[0].image if active else "-", f"{active[0].uptime_s:.0f}s" if active else "-",
                     f"{s.spares_ready}/{s.spares_wanted}" if s.spares_wanted or s.spares_note else s.spares_ready])
    table(f"instance {instance} ({st.flavor}, {st.public_host}, bind {st.bind}"
          + (f", {st.backend} {st.where}" if st.where else "") + ")",
          ["site", "url", "health", "probes", "image", "uptime", "spares"], rows)
    if st.engine:
        click.echo(f"engine: {st.engine}; containers not listed: the sites, routes and lease are what the front proxy "
                   "holds and the probes say")
    for s in st.sites:
        if s.spares_note:  # the capacity plan gave it fewer spares than the catalog wants
            click.echo(f"fewer spares: {s.spares_note}")
        for kill in s.oom_kills:
            click.echo(f"{s.site}: {kill}")
    if st.lease:
        left = float(st.lease.get("expires", 0) or 0) - time.time()
        click.echo(f"lease: {st.lease.get('state')} in pool {st.lease.get('pool')}"
                   + (f", held by {st.lease.get('holder') or '?'} ({', '.join(st.lease.get('sites') or [])}), "
                      f"expires in {left:.0f}s" if st.lease.get("state") == "leased" else ""))
    if pool is not None:
        show_pool(instance, pool)
    exit_unless(st.healthy)


@cli.command()
@sites_argument
@instance_option
@click.option("--wait", is_flag=True, help="wait (up to each site's deadline) until healthy")
@json_option
@pass_ctx
def health(ctx: Ctx, site_names: tuple[str, ...], instance: str, wait: bool, as_json: bool) -> None:
    """Run the sites' health probes now."""
    from envctl.render import emit_json, table

    res = ctx.lab(instance).health(named_sites(ctx, site_names), wait=wait)
    ok = all(p.ok for ps in res.values() for p in ps)
    if as_json:
        emit_json({"ok": ok, "sites": {k: [p.to_dict() for p in v] for k, v in res.items()}})
    else:
        table(None, ["site", "probe", "ok", "latency", "detail"],
              [[s, p.name, "ok" if p.ok else "[red]FAIL[/]", f"{p.latency_ms:.0f}ms", p.detail[:80]]
               for s, ps in res.items() for p in ps])
    exit_unless(ok)


@cli.command("env")
@click.option("--format", "fmt", type=click.Choice(["shell", "dotenv", "json", "browsergym", "agentlab",
                                                    "webarena-verified"]),
              default="shell", show_default=True)
@click.option("--benchmark", type=click.Choice(["webarena", "visualwebarena"]), default="webarena",
              show_default=True, help="which harness's names (shell/dotenv)")
@click.option("--out", default=None, help="webarena-verified: the config file to write [<auth dir>/webarena-verified.json]; "
                                          "'-' prints it (it holds the benchmark accounts' passwords)")
@click.option("--header-login", is_flag=True,
              help="browsergym: add PW_EXTRA_HEADERS, the header-login file (for harnesses that log in by header "
                   "alone: BrowserGym's own form login times out on a site the headers logged in)")
@instance_option
@auth_dir_option
@json_option
@pass_ctx
def env_cmd(ctx: Ctx, fmt: str, benchmark: str, out: str | None, header_login: bool, instance: str,
            auth_dir: str | None, as_json: bool) -> None:
    """The URLs for harnesses, exactly as WebArena, VisualWebArena, BrowserGym, AgentLab or webarena-verified
    expect them (--header-login: BrowserGym's PW_EXTRA_HEADERS, where sites log in by header).

    With --json, shell/dotenv/browsergym print the same variables as one flat JSON object."""
    import json

    from envctl.envformat import format_env, values, webarena_verified, write_webarena_verified
    from envctl.render import emit_json

    lab = ctx.lab(instance, auth_dir)
    if fmt != "agentlab" and lab.settings() is None:
        raise EnvctlError(f"instance '{instance}' does not exist on this Docker engine",
                          "start it with 'envctl up', or see 'envctl instances'")
    if out is not None and fmt != "webarena-verified":
        raise click.UsageError("--out goes with --format webarena-verified")
    if header_login and fmt != "browsergym":
        raise click.UsageError("--header-login goes with --format browsergym (PW_EXTRA_HEADERS)")
    if fmt == "webarena-verified":
        if out == "-":
            return click.echo(json.dumps(webarena_verified(lab), indent=2))
        path = write_webarena_verified(lab, out)
        if as_json:
            return emit_json({"config_file": str(path), "config": webarena_verified(lab, credentials=False)})
        return click.echo(str(path))
    if as_json and fmt in ("shell", "dotenv", "browsergym"):
        return emit_json(values(lab, fmt, benchmark, header_login))
    click.echo(format_env(lab, fmt, benchmark, header_login), nl=False)


@cli.command()
@json_option
@pass_ctx
def instances(ctx: Ctx, as_json: bool) -> None:
    """Every envctl instance on this engine with its URL set."""
    from envctl.lab import Lab
    from envctl.render import emit_json, table

    found = Lab.instances(ctx.catalog)
    if as_json:
        return emit_json([i.to_dict() for i in found])
    table(None, ["instance", "flavor", "state", "bind", "offset", "sites", "homepage"],
          [[i.instance, i.flavor, i.state, i.bind, i.port_offset, ",".join(i.sites),
            i.webarena.get("HOMEPAGE", "")] for i in found])


@cli.command()
@click.argument("site")
@click.option("--service", default=None, help="service of a multi-container site (e.g. db)")
@click.option("-f", "--follow", is_flag=True)
@click.option("--tail", type=click.IntRange(0, 1_000_000), default=100, show_default=True)
@instance_option
@pass_ctx
def logs(ctx: Ctx, site: str, service: str | None, follow: bool, tail: int, instance: str) -> None:
    """Logs of a site's active container."""
    lab = ctx.lab(instance)
    if follow:
        for chunk in lab.follow_logs(site, service=service):
            click.echo(chunk, nl=False)
    else:
        click.echo(lab.logs(site, service=service, tail=tail), nl=False)


@cli.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("site")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--service", default=None)
@instance_option
@pass_ctx
def exec_cmd(ctx: Ctx, site: str, argv: tuple[str, ...], service: str | None, instance: str) -> None:
    """Run a command in a site's active container: envctl exec shopping -- mysql -e 'SELECT 1'."""
    rc, out = ctx.lab(instance).exec(site, list(argv), service=service)
    click.echo(out)
    sys.exit(rc)


@cli.command()
@sites_argument
@click.option("--all", "all_sites", is_flag=True, help="every login site that is up (the default)")
@instance_option
@click.option("--out", "out", default=None, help="folder for the state files [.auth]")
@click.option("--check", "check_only", is_flag=True, help="validate existing files with the expiry probes; no login")
@click.option("--max-age", default=None, help="renew files older than this (90s, 30m, 12h, 2d); keep younger valid ones")
@json_option
@pass_ctx
def login(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, instance: str, out: str | None, check_only: bool,
          max_age: str | None, as_json: bool) -> None:
    """Log in with each site's benchmark account; write Playwright storage_state files named as upstream."""
    from envctl.render import emit_json, table

    if site_names and all_sites:
        raise click.UsageError("name sites or pass --all, not both")
    report = ctx.lab(instance).login_report(named_sites(ctx, site_names), out=out, check_only=check_only, max_age=max_age)
    if as_json:
        emit_json(report.to_dict())
    else:
        table(None, ["file", "ok", "action", "seconds", "problem"],
              [[f.name, "[green]ok[/]" if f.ok else "[red]FAIL[/]", f.action, f"{f.seconds:.1f}", f.error]
               for f in [*report.files, *([report.headers] if report.headers else [])]])
    exit_unless(report.ok)


