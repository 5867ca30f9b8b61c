"""envctl serve (the reset server and lease pool) and envctl lease."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from envctl.cli.core import (Ctx, finite, cli, flavor_option,
                             instance_option, json_option, pass_ctx)
from envctl.errors import EnvctlError, UsageError


@cli.command()
@click.option("--host", "--bind", "host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="[the catalog's reset_server.port: 7565]")
@click.option("--port-offset", type=click.IntRange(0, 60000), default=0,
              help="added to --port (one server per instance on a host)")
@click.option("--token", default=None, envvar="ENVCTL_SERVE_TOKEN",
              help="required as http://host:port/<token>/... or 'Authorization: Bearer'; generated into "
                   "<state dir>/serve-<instance>.token when --bind is not loopback (ENVCTL_SERVE_TOKEN)")
@click.option("--instances", default=None, metavar="N|auto",
              help="hand out leases on a pool of N instances <instance>-1..N (brought up or finished when not "
                   "running); 'auto': as many as the capacity plan fits in this host's memory")
@flavor_option
@click.option("--sites", "pool_sites", default=None, help="comma-separated sites of the pool's instances [all]")
@click.option("--spares", type=click.IntRange(0, 8), default=None, help="spares per site on the pool's instances")
@click.option("--heal-after", type=click.FloatRange(1, 86400), default=60.0, show_default=True, callback=finite,
              help="seconds a site may fail its probes before it is replaced")
@click.option("--max-lease", type=click.FloatRange(1, 7 * 24 * 3600), default=None, callback=finite,
              help="reclaim (and reset) a lease held longer than this many seconds, even while it heartbeats "
                   "(a hung episode); a lease's own max_seconds may only be shorter")
@click.option("--base-offset", type=click.IntRange(0, 60000), default=10000, show_default=True,
              help="the pool's instances get free port offsets from here, in steps of 1000")
@click.option("--readers", type=click.IntRange(1, 256), default=None,
              help="read leases (access read) one instance takes at most [2 per CPU of this host, at least 2]")
@click.option("--reverify-every", type=click.FloatRange(0, 86400), default=60.0, show_default=True, callback=finite,
              help="re-verify one free instance in the background at most every this many seconds (probes and every "
                   "fingerprint; a changed one is quarantined and rebuilt); 0: never")
@click.option("--reverify-load", type=click.FloatRange(0, 10000), default=None, callback=finite,
              help="re-verify only while this host's 1-minute load average is below this [its CPU count]")
@instance_option
@pass_ctx
def serve(ctx: Ctx, host: str, port: int | None, port_offset: int, token: str | None, instances: str | None,
          flavor: str | None, pool_sites: str | None, spares: int | None, heal_after: float, max_lease: float | None,
          base_offset: int, readers: int | None, reverify_every: float, reverify_load: float | None,
          instance: str) -> None:
    """Reset server speaking BrowserGym's protocol (GET /reset, GET /status) plus POST /reset/SITE;
    with --instances N, also leases of isolated, verified-pristine instances (POST /leases, GET /metrics)."""
    from envctl.serve import make_pool
    from envctl.serve import serve as make
    from envctl.validate import validate_host, validate_port_offset

    from envctl.validate import validate_token

    port = port or ctx.catalog.reset_server.port
    validate_host(host, "--bind")
    validate_port_offset(port_offset, [port])
    if token is not None:
        validate_token(token)
    names = [n.strip() for n in (pool_sites or "").split(",") if n.strip()]
    pool_site_names = ctx.catalog.resolve(names) if names else None
    if instances is not None and instances.strip().lower() != "auto":  # a count and ports out of range: refused
        _pool_size(ctx, instances, instance, flavor, pool_site_names, spares, base_offset)  # before the engine is asked
    if instances is not None:
        flavor = _pool_flavor(ctx, instance, flavor, ctx.catalog.resolve(pool_site_names, all_sites=not pool_site_names))
    size = _pool_size(ctx, instances, instance, flavor, pool_site_names, spares, base_offset)
    lab = ctx.lab(instance)
    if lab.settings() is None and size is None:
        raise EnvctlError(f"instance '{instance}' does not exist on this Docker engine",
                          "start it with 'envctl up' before serving its resets, or serve a pool with --instances N")
    if max_lease is not None and size is None:
        raise UsageError("--max-lease needs a lease pool", "add --instances N")
    if readers is not None and size is None:
        raise UsageError("--readers needs a lease pool", "add --instances N")
    pool = None
    if size is not None:
        pool = make_pool(lab, size, flavor=flavor, sites=pool_site_names, spares=spares, heal_after=heal_after,
                         base_offset=base_offset, max_lease=max_lease, bind=host if host != "0.0.0.0" else "127.0.0.1",
                         readers=readers, reverify_every=reverify_every, reverify_load=reverify_load,
                         say=lambda m: click.echo(m, err=True))
    server = make(lab, host, port + port_offset, token, pool=pool)
    click.echo(f"envctl reset server for instance '{instance}' on http://{host}:{server.server_address[1]}"
               + (f" (lease pool of {size}; leases answer 503 + Retry-After until its instances are up)"
                  if pool else ""), err=True)
    if pool is not None:
        pool.start()
    try:
        server.serve_forever()
    finally:
        if pool is not None:
            pool.stop()
        server.server_close()


def _pool_flavor(ctx: Ctx, instance: str, flavor: str | None, names: list[str]) -> str:
    """The pool's flavor: the one given, else the one its first member runs, else the one whose images are here
    (said in one line); refused at once, in one line, when that flavor's images are missing."""
    lab = ctx.lab(instance)
    if flavor is None:
        running = ctx.lab(f"{instance}-1").settings()
        if running is not None:
            flavor = running.flavor
        else:
            flavor, why = lab.choose_flavor(names)
            click.echo(f"pool flavor {flavor}: {why} (--flavor chooses)", err=True)
    lab.check_images(names, flavor)
    return flavor


def _pool_size(ctx: Ctx, instances: str | None, instance: str, flavor: str | None, sites: list[str] | None,
               spares: int | None, base_offset: int) -> int | None:
    """--instances N|auto -> N, refusing what cannot work before anything is started."""
    if instances is None:
        return None
    if instances.strip().lower() == "auto":
        from envctl.serve import pool_size

        names = ctx.catalog.resolve(sites, all_sites=not sites)
        size, why = pool_size(ctx.lab(instance), names, flavor or "full", spares)
        if size < 1:
            raise EnvctlError(f"--instances auto: not even one instance fits ({why})",
                              "free memory, serve fewer --sites, pass --spares 0, or give --instances N")
        click.echo(f"--instances auto: {why}", err=True)
    else:
        try:
            size = int(instances)
        except ValueError:
            raise UsageError(f"--instances {instances[:20]!r} is not a number", "give 1 to 64, or 'auto'") from None
        if not 1 <= size <= 64:
            raise UsageError(f"--instances {size} is out of range", "give 1 to 64, or 'auto'")
    from envctl.validate import PORT_OFFSET_MAX

    names = ctx.catalog.resolve(sites, all_sites=not sites)
    top = max(p for n in names for p in ctx.catalog.site(n).public_ports().values())
    last = base_offset + 1000 * (size - 1)  # the last member's offset, when every one before it is free
    if top + last > 65535:
        raise UsageError(f"{size} instance(s) from --base-offset {base_offset} need ports up to {top + last}, past 65535",
                         "give a lower --base-offset or fewer --instances")
    if last > PORT_OFFSET_MAX:
        raise UsageError(f"{size} instance(s) from --base-offset {base_offset} need port offsets up to {last}, past "
                         f"{PORT_OFFSET_MAX}", "give a lower --base-offset or fewer --instances")
    return size


# -- leases (docs/architecture.md, "Leases") ------------------------------------------------------------
@cli.group()
def lease() -> None:
    """Isolated, verified-pristine instances on lease from 'envctl serve --instances N' (--instance names the
    pool); $ENVCTL_LEASE_SERVER overrides."""


def _lease_client(instance: str) -> Any:
    from envctl.leases.client import LeaseClient, find_server

    return LeaseClient(find_server(None, instance))


def pool_leases(instance: str) -> dict[str, Any] | None:
    """What the lease server of ``instance`` (a pool) says, when one runs; None otherwise."""
    from envctl.leases.client import running_server_url

    try:
        url = running_server_url(instance)
    except UsageError:
        return None
    if url is None:
        return None
    from envctl.leases.client import LeaseClient

    try:
        data = LeaseClient(url).listing()
    except EnvctlError:
        return None
    return data if isinstance(data, dict) and "instances" in data else None


def _state_cell(r: dict[str, Any]) -> str:
    """A member's state as 'lease list' shows it: why it is broken or quarantined, who shares it and whether a change
    tainted its readers, and a quarantine it was rebuilt after."""
    cell = r["state"]
    if r["state"] == "shared":
        cell += f" ({len(r.get('readers') or [])}/{r.get('limit', '?')} readers"
        cell += f"; tainted: {str(r['taint'])[:60]})" if r.get("taint") else (f"; {r['closed']})" if r.get("closed") else ")")
    elif r.get("error"):
        cell += f" ({r['error'][:80]})"
    elif r.get("quarantined"):
        q = r["quarantined"]
        cell += f" (rebuilt after its quarantine at {q.get('at', '?')}: {str(q.get('why', ''))[:60]})"
    return cell


def show_pool(instance: str, data: dict[str, Any]) -> None:
    from envctl.render import table

    nodes = any(r.get("node") for r in data["instances"])
    rows = []
    for r in data["instances"]:
        leases = r.get("readers") or ([r] if r.get("id") else [{}])
        for i, x in enumerate(leases):
            holder = x.get("holder", "") + (f" [tainted: {str(x['tainted'])[:50]}]" if x.get("tainted") else "")
            rows.append([r["instance"] if i == 0 else "", *([r.get("node", "") if i == 0 else ""] if nodes else []),
                         _state_cell(r) if i == 0 else "", x.get("id", ""), x.get("access", "") if x.get("id") else "",
                         holder, ",".join(x.get("lease_sites") or (r.get("sites") if i == 0 else []) or []),
                         f"{x['seconds_left']:.0f}s" if x.get("seconds_left") is not None else ""])
    table(f"pool {instance}", ["instance", *(["node"] if nodes else []), "state", "lease", "access", "holder", "sites",
                               "expires in"], rows)
    s = data["summary"]
    resets = ", ".join(f"{t}: {v['count']} (mean {v['mean_s']}s, {v['failed']} failed)" for t, v in s["resets"].items())
    turn = s.get("turnaround") or {}
    click.echo(("pool starting; " if s.get("starting") else "")
               + f"leases active {s['leases_active']} ({s.get('leases_read', 0)} read), free {s['leases_free']}; "
               f"acquired {s['acquired']}, released {s['released']}, expired {s['expired']}, reclaimed "
               f"{s.get('reclaimed', 0)}, refused {s['rejected']}; dirty instances caught {s.get('dirty_found', 0)}, "
               f"quarantined {s.get('quarantined', 0)}; tainted read leases {s.get('tainted', 0)}")
    click.echo(f"resets: {resets or 'none'}; release to free: p50 {turn.get('p50_s')}s p95 {turn.get('p95_s')}s "
               f"({turn.get('count', 0)}); heals: {sum(s['heals'].values())} {s['heals'] or ''}; "
               f"spares ready: {s['spares_ready'] or 'none'}")
    click.echo(f"verifications {s.get('verifications', 0)}, skipped {s.get('verifications_skipped', 0)} (signals "
               f"unchanged); background re-verifications {s.get('reverified', 0)} (every "
               f"{s.get('reverify_every', '?')}s when idle, {s.get('reverify_deferred', 0)} put off: host busy)")
    if s.get("nodes"):
        n = s["nodes"]
        click.echo(f"nodes: {n['states']}; instances per node: {n['instances']}; node losses: {n['losses']}; "
                   f"leases lost: {s.get('lost', 0)}")


@lease.command("acquire")
@click.option("--sites", default=None, help="comma-separated sites the lease needs [all of the instance's]")
@click.option("--ttl", type=click.FloatRange(1, 7 * 24 * 3600), default=600.0, show_default=True, callback=finite,
              help="seconds until the lease expires unless a heartbeat ('envctl lease heartbeat') extends it")
@click.option("--wait", type=click.FloatRange(0, 3600), default=0.0, callback=finite,
              help="wait up to this many seconds for a free instance")
@click.option("--max-seconds", type=click.FloatRange(1, 7 * 24 * 3600), default=None, callback=finite,
              help="the server reclaims the lease this long after it was granted, heartbeats or not")
@click.option("--holder", default="", help="who holds the lease (shown by 'lease list')")
@click.option("--access", type=click.Choice(["write", "read"]), default="write", show_default=True,
              help="read: share a verified instance with other read leases (told if one of them changed it)")
@click.option("--format", "fmt", type=click.Choice(["shell", "json", "browsergym"]), default="shell", show_default=True)
@click.option("--out", default=None, help="also write the login state files (storage_state) into this folder")
@instance_option
@json_option
def lease_acquire(sites: str | None, ttl: float, wait: float, max_seconds: float | None, holder: str, access: str,
                  fmt: str, out: str | None, instance: str, as_json: bool) -> None:
    """Lease a free instance whose every site verifies pristine (--access read: or share one with other readers);
    print its variables (ENVCTL_LEASE is the id to release). If anything fails after the lease was granted, it is
    given back."""
    import json as _json
    import shlex

    from envctl.locks import write_private

    names = [n for n in (sites or "").split(",") if n]
    ctx_obj = click.get_current_context().find_object(Ctx)
    if names and ctx_obj is not None:
        ctx_obj.catalog.resolve(names)  # a typo is refused before the server is asked
    from envctl.locks import usable_dir

    # a file there (or above it), or a read-only folder: refused before the server is asked
    folder = usable_dir(out, "--out", hint="give --out a folder for the login state files") if out else None
    client = _lease_client(instance)
    lease = client.acquire(names or None, ttl=ttl, wait=wait, holder=holder or f"cli pid {os.getpid()}",
                           max_seconds=max_seconds, access=access)
    try:
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                for fname, state in (lease.auth or {}).items():
                    write_private(folder / Path(fname).name, _json.dumps(state))
            except OSError as exc:
                raise EnvctlError(f"cannot write the login state into {out}: {exc.strerror or exc}",
                                  "give a writable folder with --out") from None
        data = lease.to_dict()
        if as_json or fmt == "json":
            from envctl.render import emit_json

            return emit_json(data)
        env = data.get("env") or {}
        if fmt == "browsergym":
            env = {k: v for k, v in env.items() if k.startswith(("WA_", "VWA_")) or k.startswith("ENVCTL_")}
        click.echo("".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in env.items()), nl=False)
    except BaseException:
        try:
            client.release(lease.id)
            click.echo(f"note: lease {lease.id} given back (the command failed after it was granted)", err=True)
        except EnvctlError as exc:
            click.echo(f"warning: lease {lease.id} could not be given back ({str(exc).splitlines()[0]}); "
                       f"release it with 'envctl lease release {lease.id} --instance {instance}'", err=True)
        raise


@lease.command("heartbeat")
@click.argument("lease_id")
@click.option("--ttl", type=click.FloatRange(1, 7 * 24 * 3600), default=None, callback=finite,
              help="a new time to live in seconds [the lease's own]")
@instance_option
@json_option
def lease_heartbeat(lease_id: str, ttl: float | None, instance: str, as_json: bool) -> None:
    """Extend a lease (exit 1 with why when it already ended: expired, reclaimed or released)."""
    data = _lease_client(instance).heartbeat(lease_id, ttl)
    if as_json:
        from envctl.render import emit_json

        return emit_json(data)
    click.echo(f"lease {lease_id} on {data.get('instance')}: expires in {data.get('seconds_left', 0):.0f}s"
               + (f"; tainted: {data['tainted']}" if data.get("tainted") else ""))


@lease.command("release")
@click.argument("lease_id")
@instance_option
@json_option
def lease_release(lease_id: str, instance: str, as_json: bool) -> None:
    """Give a lease back; every site of its instance that does not verify (and the leased ones) is
    reset before the instance is leased again."""
    data = _lease_client(instance).release(lease_id)
    if as_json:
        from envctl.render import emit_json

        return emit_json(data)
    if data.get("access") == "read":
        click.echo(f"released read lease {lease_id} ({data.get('instance')}): "
                   + (f"tainted: {data['tainted']}" if data.get("tainted") else
                      f"not tainted as far as known ({data['reading']})" if data.get("reading") else "not tainted"))
        return
    click.echo(f"released {lease_id} ({data.get('instance')}): resetting {', '.join(data.get('lease_sites') or [])}")


@lease.command("list")
@instance_option
@json_option
def lease_list(instance: str, as_json: bool) -> None:
    """The pool's instances, their leases (holder, expiry), and the figures of GET /metrics."""
    from envctl.render import emit_json

    data = _lease_client(instance).listing()
    if as_json:
        return emit_json(data)
    show_pool(instance, data)


