"""Several 'hosts' on one machine: network namespaces on a bridge, for multi-host DDS tests.

Addresses are private and exist only inside the test's namespaces (no route to the root
namespace, no forwarding); everything is deleted afterwards."""
import os
import subprocess
import uuid


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


class Hosts:
    def __init__(self, names, subnet='10.231.77'):
        self.tag = uuid.uuid4().hex[:6]
        self.sw = f'sw{self.tag}'
        self.ns = {n: f'{n}{self.tag}' for n in names}
        self.ifaces = {}
        self.subnet = subnet

    def __enter__(self):
        sh('ip', 'netns', 'add', self.sw)
        sh('ip', '-n', self.sw, 'link', 'add', 'br0', 'type', 'bridge')
        sh('ip', '-n', self.sw, 'link', 'set', 'br0', 'up')
        for i, (name, ns) in enumerate(self.ns.items(), start=1):
            sh('ip', 'netns', 'add', ns)
            host_if, sw_if = f'h{i}{self.tag}', f's{i}{self.tag}'
            sh('ip', 'link', 'add', host_if, 'type', 'veth', 'peer', 'name', sw_if)
            sh('ip', 'link', 'set', host_if, 'netns', ns)
            sh('ip', 'link', 'set', sw_if, 'netns', self.sw)
            sh('ip', '-n', self.sw, 'link', 'set', sw_if, 'master', 'br0')
            sh('ip', '-n', self.sw, 'link', 'set', sw_if, 'up')
            sh('ip', '-n', ns, 'addr', 'add', f'{self.subnet}.{i}/24', 'dev', host_if)
            sh('ip', '-n', ns, 'link', 'set', 'lo', 'up')
            sh('ip', '-n', ns, 'link', 'set', host_if, 'up')
            sh('ip', '-n', ns, 'route', 'add', '224.0.0.0/4', 'dev', host_if)  # DDS multicast discovery
            self.ifaces[name] = (host_if, sw_if)
        return self

    def prefix(self, name):
        return ['ip', 'netns', 'exec', self.ns[name]]

    def cut(self, name):  # on the switch side: the host keeps its routes
        sh('ip', '-n', self.sw, 'link', 'set', self.ifaces[name][1], 'down')

    def restore(self, name):
        sh('ip', '-n', self.sw, 'link', 'set', self.ifaces[name][1], 'up')

    def drop_egress(self, name, percent):
        ns = self.ns[name]
        sh('ip', 'netns', 'exec', ns, 'nft', 'add', 'table', 'inet', 'loss')
        sh('ip', 'netns', 'exec', ns, 'nft', 'add', 'chain', 'inet', 'loss', 'out',
           '{ type filter hook output priority 0 ; }')
        sh('ip', 'netns', 'exec', ns, 'nft', 'add', 'rule', 'inet', 'loss', 'out', 'meta', 'l4proto', 'udp',
           'numgen', 'random', 'mod', '100', '<', str(percent), 'drop')

    def __exit__(self, *exc):
        for ns in list(self.ns.values()) + [self.sw]:
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)


def available() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        sh('ip', 'netns', 'add', 'rltrprobe')
        sh('ip', 'netns', 'del', 'rltrprobe')
        return True
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False
