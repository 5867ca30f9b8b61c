"""miniweb: the code shared by envctl's mini-flavor stand-in sites.

Each site's own modules live in its folder's ``app/`` (``envctl/images/mini/<site>/app``) and are
copied into the image as the ``sites`` package (``/opt/miniweb/sites``, run as ``python3 -m
sites.<module>``). They share this core (:mod:`miniweb.core`): database access for MariaDB and
PostgreSQL, server-side sessions stored in the site's own database (so a recreated container knows
no old cookie), a page layout, an embedded PostgreSQL (:mod:`miniweb.pgembed`), and a process
supervisor (:mod:`miniweb.supervise`) that runs the database and the app in one container and
shuts both down cleanly on SIGTERM.
"""
