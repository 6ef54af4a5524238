"""DSN forms whose password must never be printed (issue 12, item 3); shared by the unit and
integration tests."""

# (id, DSN, the secret's every fragment that must not appear). Port 1 is closed: a DSN that
# parses fails with "Connection refused" at once.
FORMS = [
    ("uri-bad-percent", "postgresql://u:S3cret%zzPW@127.0.0.1:1/db", ["S3cret%zzPW", "S3cret"]),
    ("uri-unclosed-ipv6", "postgresql://u:Pw1234Secret@[::1/db", ["Pw1234Secret"]),
    ("uri-raw-at-sign", "postgresql://u:At@Sign99@[::1/db", ["At@Sign99", "Sign99"]),
    ("uri-percent-encoded", "postgresql://u:Pct%40Enc%2F99@[::1/db", ["Pct%40Enc%2F99", "Pct@Enc/99"]),
    (
        "uri-encoded-space",
        "postgresql://u:Two%20Words99@[::1/db",
        ["Two%20Words99", "Two Words99", "Words99"],
    ),
    ("uri-valid-refused", "postgresql://u:Plain99Secret@127.0.0.1:1/db", ["Plain99Secret"]),
    ("uri-bad-port", "postgresql://u:PortPw99@127.0.0.1:notaport/db", ["PortPw99"]),
    ("query-param-bad-uri", "postgresql://u@[::1/db?password=QueryPw77", ["QueryPw77"]),
    ("query-param-refused", "postgresql://u@127.0.0.1:1/db?password=QueryPw78", ["QueryPw78"]),
    ("kv-space-in-password", "host=127.0.0.1 password=Swordfish9 Tail7Secret", ["Swordfish9", "Tail7Secret"]),
    ("kv-unterminated-quote", "host=127.0.0.1 password='Open Quote9", ["Open Quote9", "Quote9"]),
    (
        "kv-quoted-escaped",
        "host=127.0.0.1 port=1 password='Esc\\'aped9 x' dbname=nodb",
        ["Esc'aped9", "aped9"],
    ),
    ("kv-stray-keyword", "host=127.0.0.1 password=Kw99Secret port", ["Kw99Secret"]),
    ("kv-bad-percent-like", "host=127.0.0.1 port=abc password=Pc%zz99", ["Pc%zz99"]),
    # sslpassword: the passphrase of the client's key (sslkey), as secret as the password.
    ("ssl-query-param-bad-uri", "postgresql://u@[::1/db?sslpassword=KeyPass77", ["KeyPass77"]),
    ("ssl-query-bad-percent", "postgresql://u@127.0.0.1:1/db?sslpassword=Key%zzPass78", ["Key%zzPass78"]),
    ("ssl-kv-space", "host=127.0.0.1 sslpassword=Swordfish8 Tail8Secret", ["Swordfish8", "Tail8Secret"]),
]
IDS = [form[0] for form in FORMS]
