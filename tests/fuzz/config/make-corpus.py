#!/usr/bin/env python3
"""Writes the fuzz_config seed corpus into tests/fuzz/corpus/fuzz_config/ (idempotent).

Each seed is one selector byte (0 config file, 1 command line with NUL-separated arguments,
2 FSM JSON, 3 channel settings JSON, 4 MQ permissions JSON) and that loader's input: the
shipped files from config/, the shapes the unit and integration tests use, and one input per
kind of error each loader reports. Files are named by the SHA-1 of their content. The
generated files are committed; rerun this after editing it. The corpus also holds inputs found
by libFuzzer, minimised with -merge=1 (see tests/fuzz/run-fuzzers.sh).
"""
import hashlib
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
CORPUS = os.path.join(HERE, "..", "corpus", "fuzz_config")
CONFIG_FILE, CONFIG_ARGS, FSM, SETTINGS, MQPERM = range(5)


def write(selector, data):
    if isinstance(data, str):
        data = data.encode()
    data = bytes([selector]) + data
    os.makedirs(CORPUS, exist_ok=True)
    with open(os.path.join(CORPUS, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def shipped(name):
    with open(os.path.join(ROOT, "config", name), "rb") as f:
        return f.read()


# ---- config file -------------------------------------------------------------------------------

write(CONFIG_FILE, """# chanqd configuration
workers = 2
client-addr = 127.0.0.1:12108
server-addr = "127.0.0.1:11288"
ws-addr = ""
kcp-profile = kcp-go
dev = yes
log-level = warn
sendq-soft-limit = 1m
sendq-hard-limit = 8M
max-packet-size = 65535
ws-origins = "https://a.example, https://b.example"
store-backend = sqlite
mq-max-content = 64k
""")
write(CONFIG_FILE, "\n\n   # indented comment\n\tdev\t=\tf\r\nlog-level = -1\n")
write(CONFIG_FILE, "ca = :12108\nsa = :11288\nloglevel = 3\ncfsm = \"\"\n")
write(CONFIG_FILE, "auth-provider = file\n")  # cross-option check is not run by the file loader
write(CONFIG_FILE, "workers\n")  # no '='
write(CONFIG_FILE, "no-such-option = 1\n")
write(CONFIG_FILE, "config = other.conf\n")
write(CONFIG_FILE, "help = true\n")
write(CONFIG_FILE, "workers = 257\n")
write(CONFIG_FILE, "workers = abc\n")
write(CONFIG_FILE, "sendq-hard-limit = 5x\n")
write(CONFIG_FILE, "sendq-hard-limit = 99999999999999999999\n")
write(CONFIG_FILE, "kcp-profile = slow\n")
write(CONFIG_FILE, "dev = maybe\n")
write(CONFIG_FILE, "ws-path = \"\"\"\nweb-root = \"a\"b\"\n")
write(CONFIG_FILE, b"ready-file = a\x00b\nworkers = 1\n")

# ---- command line ------------------------------------------------------------------------------


def args(*a):
    return "\0".join(a)


write(CONFIG_ARGS, args("-ca", ":12108", "-sa=:11288", "-dev", "-loglevel", "-1"))
write(CONFIG_ARGS, args("--workers", "4", "--no-dev", "--max-packet-size=65535",
                        "--sendq-soft-limit", "1m", "--sendq-hard-limit=8m"))
write(CONFIG_ARGS, args("--client-addr", "127.0.0.1:0", "--server-addr", "127.0.0.1:0",
                        "--admin-addr", "", "--mq-addr", "", "--ready-file", "/tmp/ready",
                        "--log-level", "warn"))
write(CONFIG_ARGS, args("--auth-provider", "file"))  # needs --auth-token-file
write(CONFIG_ARGS, args("--sendq-soft-limit", "9m", "--sendq-hard-limit", "8m"))
write(CONFIG_ARGS, args("--workers"))  # missing value
write(CONFIG_ARGS, args("--no-workers"))
write(CONFIG_ARGS, args("--dev=maybe"))
write(CONFIG_ARGS, args("positional"))
write(CONFIG_ARGS, args("--", "-"))
write(CONFIG_ARGS, args("--ws-path", "/a\nb"))

# ---- FSM ---------------------------------------------------------------------------------------

for name in ("client_authoratative_fsm.json", "client_non_authoratative_fsm.json",
             "server_authoratative_fsm.json", "server_conn_fsm_test.json"):
    write(FSM, shipped(name))
write(FSM, '{"states":[{"name":"A","msgtypewhitelist":" 1 , 3-5 ,65535"}]}')
write(FSM, '{"States":[{"Name":"A"},{"Name":"B"}],"InitState":"B",'
           '"Transitions":[{"FromState":"B","ToState":"A","MsgType":7}]}')
write(FSM, '{"States":[]}')
write(FSM, '{"States":[{"Name":"A","MsgTypeWhitelist":"5-2"}]}')
write(FSM, '{"States":[{"Name":"A","MsgTypeWhitelist":"65536"}]}')
write(FSM, '{"States":[{"Name":"A"}],"InitState":"Z"}')
write(FSM, '{"States":[{"Name":"A","Name":"B"}]}')
write(FSM, '{"States":[{"Name":"A","Color":"red"}]}')
write(FSM, '{"States":[{"Name":"A"}],"Transitions":[{"FromState":"A","ToState":"A",'
           '"MsgType":-1}]}')
write(FSM, '{"States": [')

# ---- channel settings --------------------------------------------------------------------------

write(SETTINGS, shipped("channel_settings_hifi.json"))
write(SETTINGS, shipped("channel_settings_lofi.json"))
write(SETTINGS, '{"1":{"TickIntervalMs":0,"DefaultFanOutIntervalMs":0,'
                '"DataMsgFullName":"testpb.TestChannelDataMessage"},"4":{}}')
write(SETTINGS, '{"2":{"aclsettings":{"sub":1,"unsub":2,"remove":3}}}')
write(SETTINGS, '{"2":{"ACLSettings":{"Sub":7}}}')
write(SETTINGS, '{"x":{}}')
write(SETTINGS, '{"1":{"TickIntervalMs":-5}}')
write(SETTINGS, '{"1":{"TickIntervalMs":"fast"}}')
write(SETTINGS, '[1, 2]')

# ---- MQ permissions ----------------------------------------------------------------------------

write(MQPERM, '{"1": {"token": "s1", "produce": ["*"], "consume": ["*"], "admin": true},'
              ' "2": {"token": "s2", "consume": ["orders"]},'
              ' "3": {"token": "s3", "produce": ["orders"]}}')
write(MQPERM, '{}')
write(MQPERM, '{"1": {}, "01": {}}')
write(MQPERM, '{"1": {"produce": ["bad topic"]}}')
write(MQPERM, '{"1": {"admin": "yes"}}')
write(MQPERM, '{"4294967296": {}}')
write(MQPERM, '{"1": {"tokn": "x"}}')
write(MQPERM, '"not an object"')
