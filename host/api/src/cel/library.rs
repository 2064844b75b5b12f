//! The Kubernetes CEL libraries (`k8s.io/apiserver/pkg/cel/library`) that
//! real CRDs use, on top of cel-rust's stdlib, strings and lists
//! extensions:
//!
//! * lists: `isSorted()`, `sum()`, `min()`, `max()`, `indexOf(x)`,
//!   `lastIndexOf(x)`;
//! * regex: `find(re)`, `findAll(re)`, `findAll(re, n)` (`matches` is
//!   cel-rust's);
//! * URLs: `url(s)`, `isURL(s)`, `getScheme()`, `getHost()`,
//!   `getHostname()`, `getPort()`, `getEscapedPath()`, `getQuery()`;
//! * IPs and CIDRs: `ip(s)`, `isIP(s)`, `ip.isCanonical(s)`, `family()`,
//!   `isUnspecified()`, `isLoopback()`, `isLinkLocalMulticast()`,
//!   `isLinkLocalUnicast()`, `isGlobalUnicast()`; `cidr(s)`, `isCIDR(s)`,
//!   `containsIP(ip|s)`, `containsCIDR(cidr|s)`, `ip()`, `masked()`,
//!   `prefixLength()`; `string(ip|cidr)`;
//! * quantities: `quantity(s)`, `isQuantity(s)`, `isInteger()`,
//!   `asInteger()`, `asApproximateFloat()`, `sign()`, `add(q|int)`,
//!   `sub(q|int)`, `isGreaterThan(q)`, `isLessThan(q)`, `compareTo(q)`.
//!
//! IPs, CIDRs, URLs and quantities are opaque values (`net.IP`,
//! `net.CIDR`, `kubernetes.URL`, `kubernetes.Quantity`) equal when their
//! values are, as upstream.

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelString, DYN_TYPE, LIST_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::net::IpAddr;

/// Registers the libraries on `env`.
pub fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    lists(env)?;
    cel::add_member_overload!(env, fn find: (CelString, CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn find_all: (CelString, CelString) -> Result<CelList>)?;
    cel::add_member_overload!(env, fn find_all_n: (CelString, CelString, CelInt) -> Result<CelList>,
        name = "findAll")?;

    cel::add_overload!(env, fn escape_key: (CelString) -> CelString, name = "jsonpatch.escapeKey")?;
    cel::add_overload!(env, fn url: (CelString) -> Result<Url>)?;
    cel::add_overload!(env, fn is_url: (CelString) -> CelBool, name = "isURL")?;
    cel::add_member_overload!(env, fn get_scheme: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_host: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_hostname: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_port: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_escaped_path: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_query: (Url) -> CelMap)?;

    cel::add_overload!(env, fn ip: (CelString) -> Result<Ip>)?;
    cel::add_overload!(env, fn is_ip: (CelString) -> CelBool, name = "isIP")?;
    cel::add_overload!(env, fn is_canonical: (CelString) -> Result<CelBool>, name = "ip.isCanonical")?;
    cel::add_overload!(env, fn ip_string: (Ip) -> CelString, name = "string")?;
    cel::add_member_overload!(env, fn family: (Ip) -> CelInt)?;
    cel::add_member_overload!(env, fn is_unspecified: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_loopback: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_global_unicast: (Ip) -> CelBool)?;

    cel::add_overload!(env, fn cidr: (CelString) -> Result<Cidr>)?;
    cel::add_overload!(env, fn is_cidr: (CelString) -> CelBool, name = "isCIDR")?;
    cel::add_overload!(env, fn cidr_string: (Cidr) -> CelString, name = "string")?;
    cel::add_member_overload!(env, fn contains_ip: (Cidr, Ip) -> CelBool, name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_ip_string: (Cidr, CelString) -> Result<CelBool>,
        name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_cidr: (Cidr, Cidr) -> CelBool, name = "containsCIDR")?;
    cel::add_member_overload!(env, fn contains_cidr_string: (Cidr, CelString) -> Result<CelBool>,
        name = "containsCIDR")?;
    cel::add_member_overload!(env, fn cidr_ip: (Cidr) -> Ip, name = "ip")?;
    cel::add_member_overload!(env, fn masked: (Cidr) -> Cidr)?;
    cel::add_member_overload!(env, fn prefix_length: (Cidr) -> CelInt)?;

    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble)?;
    cel::add_member_overload!(env, fn sign: (Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn add: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn add_int: (Quantity, CelInt) -> Result<Quantity>, name = "add")?;
    cel::add_member_overload!(env, fn sub: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn sub_int: (Quantity, CelInt) -> Result<Quantity>, name = "sub")?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> CelInt)?;
    Ok(())
}

fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

// ---- lists ------------------------------------------------------------

fn lists(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list.isSorted()", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list.sum()", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list.min()", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list.max()", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list.indexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list.lastIndexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )
}

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Answer<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

/// The elements of the receiver, borrowed.
fn elements<'b, 'v>(list: &'b CowVal<'_, 'v>) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let iterable = list
        .as_ref()
        .as_iterable()
        .ok_or_else(|| error("list", "receiver is not a list"))?;
    let mut items = iterable.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    Ok(out)
}

fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| {
            error(
                function,
                format!("{} is not comparable", a.get_type().name()),
            )
        })?
        .compare(b)
}

fn is_sorted<'b, 'v>(args: Args<'b, 'v>) -> Answer<'b, 'v> {
    let items = elements(&args[0])?;
    for pair in items.windows(2) {
        if compare("isSorted", pair[0], pair[1])? == Ordering::Greater {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

fn sum<'b, 'v>(args: Args<'b, 'v>) -> Answer<'b, 'v> {
    let items = elements(&args[0])?;
    let Some((first, rest)) = items.split_first() else {
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    let mut total = first.clone_as_boxed();
    for item in rest {
        let next = total
            .as_adder()
            .ok_or_else(|| error("sum", format!("cannot add {}", total.get_type().name())))?
            .add(*item)?
            .as_ref()
            .clone_as_boxed();
        total = next;
    }
    Ok(CowVal::Owned(total))
}

fn extreme<'b, 'v>(args: Args<'b, 'v>, function: &str, keep: Ordering) -> Answer<'b, 'v> {
    let items = elements(&args[0])?;
    let Some(mut best) = items.first().copied() else {
        return Err(error(function, format!("{function} called on empty list")));
    };
    for item in &items[1..] {
        if compare(function, *item, best)? == keep {
            best = *item;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

fn min<'b, 'v>(args: Args<'b, 'v>) -> Answer<'b, 'v> {
    extreme(args, "min", Ordering::Less)
}

fn max<'b, 'v>(args: Args<'b, 'v>) -> Answer<'b, 'v> {
    extreme(args, "max", Ordering::Greater)
}

fn position<'b, 'v>(args: Args<'b, 'v>, last: bool) -> Answer<'b, 'v> {
    let items = elements(&args[0])?;
    let needle = args[1].as_ref();
    let found = if last {
        items.iter().rposition(|i| i.equals(needle))
    } else {
        items.iter().position(|i| i.equals(needle))
    };
    Ok(CowVal::owned(CelInt::from(found.map_or(-1, |i| i as i64))))
}

fn index_of<'b, 'v>(args: Args<'b, 'v>) -> Answer<'b, 'v> {
    position(args, false)
}

fn last_index_of<'b, 'v>(args: Args<'b, 'v>) -> Answer<'b, 'v> {
    position(args, true)
}

// ---- regex ------------------------------------------------------------

fn regex(function: &str, re: &str) -> Result<regex::Regex, ExecutionError> {
    regex::Regex::new(re).map_err(|e| error(function, format!("invalid regex {re:?}: {e}")))
}

fn find(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    Ok(regex("find", re.inner())?
        .find(this.inner())
        .map_or_else(String::new, |m| m.as_str().to_owned())
        .into())
}

fn find_all(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelList<'static>, ExecutionError> {
    find_all_n(this, re, &CelInt::from(-1))
}

fn find_all_n(
    this: &CelString<'_>,
    re: &CelString<'_>,
    n: &CelInt,
) -> Result<CelList<'static>, ExecutionError> {
    let limit = usize::try_from(*n.inner()).unwrap_or(usize::MAX);
    let found: Vec<Box<dyn Val>> = regex("findAll", re.inner())?
        .find_iter(this.inner())
        .take(limit)
        .map(|m| Box::new(CelString::from(m.as_str().to_owned())) as Box<dyn Val>)
        .collect();
    Ok(CelList::from(found))
}

/// `jsonpatch.escapeKey(k)`: a key as a JSON pointer segment (RFC 6901).
fn escape_key(k: &CelString<'_>) -> CelString<'static> {
    k.inner().replace('~', "~0").replace('/', "~1").into()
}

// ---- URLs -------------------------------------------------------------

/// A URL as Go's `url.ParseRequestURI` reads it: an absolute URI or an
/// absolute path, no fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    scheme: String,
    host: String,
    path: String,
    query: String,
}

opaque!(Url, "kubernetes.URL");

fn parse_url(s: &str) -> Result<Url, String> {
    let invalid =
        |why: &str| format!("URL parse error during conversion from string: {s:?}: {why}");
    if s.is_empty() || s.chars().any(|c| c.is_ascii_control() || c == ' ') {
        return Err(invalid("invalid character"));
    }
    if s.contains('#') {
        return Err(invalid("a request URI has no fragment"));
    }
    let (scheme, rest) = match s.split_once(':') {
        Some((scheme, rest)) if !s.starts_with('/') => (scheme, rest),
        _ if s.starts_with('/') => ("", s),
        _ => return Err(invalid("invalid URI for request")),
    };
    let valid_scheme = scheme.is_empty()
        || (scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)));
    if !valid_scheme {
        return Err(invalid("first path segment in URL cannot contain colon"));
    }
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (host, path) = match before_query.strip_prefix("//") {
        Some(authority) => {
            let (authority, path) = authority
                .find('/')
                .map_or((authority, ""), |i| authority.split_at(i));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            (host.to_owned(), path.to_owned())
        }
        None if scheme.is_empty() || before_query.starts_with('/') => {
            (String::new(), before_query.to_owned())
        }
        None => return Err(invalid("invalid URI for request")),
    };
    if host.starts_with('[') && !host.contains(']') {
        return Err(invalid("missing ']' in host"));
    }
    Ok(Url {
        scheme: scheme.to_owned(),
        host,
        path,
        query: query.to_owned(),
    })
}

/// `(hostname, port)` of a `host[:port]` or `[v6]:port`.
fn split_host(host: &str) -> (&str, &str) {
    if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (name, after.strip_prefix(':').unwrap_or(""));
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name, port),
        _ => (host, ""),
    }
}

fn url(s: &CelString<'_>) -> Result<Url, ExecutionError> {
    parse_url(s.inner()).map_err(|e| error("url", e))
}

fn is_url(s: &CelString<'_>) -> CelBool {
    parse_url(s.inner()).is_ok().into()
}

fn get_scheme(u: &Url) -> CelString<'static> {
    u.scheme.clone().into()
}

fn get_host(u: &Url) -> CelString<'static> {
    u.host.clone().into()
}

fn get_hostname(u: &Url) -> CelString<'static> {
    split_host(&u.host).0.to_owned().into()
}

fn get_port(u: &Url) -> CelString<'static> {
    split_host(&u.host).1.to_owned().into()
}

fn get_escaped_path(u: &Url) -> CelString<'static> {
    u.path.clone().into()
}

fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() + 1
                && bytes.len() > i + 2
                && u8::from_str_radix(&s[i + 1..i + 3], 16).is_ok() =>
            {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'%'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn get_query(u: &Url) -> CelMap<'static> {
    let mut values: HashMap<String, Vec<String>> = HashMap::new();
    for pair in u.query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        values.entry(unescape(k)).or_default().push(unescape(v));
    }
    let map: HashMap<CelMapKey<'static>, Box<dyn Val>> = values
        .into_iter()
        .map(|(k, vs)| {
            let list: Vec<Box<dyn Val>> = vs
                .into_iter()
                .map(|v| Box::new(CelString::from(v)) as Box<dyn Val>)
                .collect();
            (
                CelMapKey::from(k),
                Box::new(CelList::from(list)) as Box<dyn Val>,
            )
        })
        .collect();
    CelMap::from(map)
}

// ---- IPs and CIDRs ----------------------------------------------------

/// An IP address, as upstream's `net.IP` CEL type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ip(IpAddr);

opaque!(Ip, "net.IP");

/// A CIDR: an address (kept as written) and a prefix length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

opaque!(Cidr, "net.CIDR");

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    if s.contains('%') {
        return Err(format!("IP address with zone value is not allowed: {s}"));
    }
    let addr: IpAddr = s
        .parse()
        .map_err(|_| format!("IP Address {s:?} parse error during conversion from string"))?;
    if let IpAddr::V6(v6) = addr
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address is not allowed: {s}"));
    }
    Ok(addr)
}

fn ip(s: &CelString<'_>) -> Result<Ip, ExecutionError> {
    parse_ip(s.inner()).map(Ip).map_err(|e| error("ip", e))
}

fn is_ip(s: &CelString<'_>) -> CelBool {
    parse_ip(s.inner()).is_ok().into()
}

fn is_canonical(s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let addr = parse_ip(s.inner()).map_err(|e| error("ip.isCanonical", e))?;
    Ok((addr.to_string() == s.inner()).into())
}

fn ip_string(ip: &Ip) -> CelString<'static> {
    ip.0.to_string().into()
}

fn family(ip: &Ip) -> CelInt {
    CelInt::from(if ip.0.is_ipv4() { 4 } else { 6 })
}

fn is_unspecified(ip: &Ip) -> CelBool {
    ip.0.is_unspecified().into()
}

fn is_loopback(ip: &Ip) -> CelBool {
    ip.0.is_loopback().into()
}

fn link_local_multicast(addr: &IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
}

fn link_local_unicast(addr: &IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_multicast(ip: &Ip) -> CelBool {
    link_local_multicast(&ip.0).into()
}

fn is_link_local_unicast(ip: &Ip) -> CelBool {
    link_local_unicast(&ip.0).into()
}

/// Go's `IP.IsGlobalUnicast`.
fn is_global_unicast(ip: &Ip) -> CelBool {
    let a = &ip.0;
    let broadcast = matches!(a, IpAddr::V4(v4) if v4.is_broadcast());
    (!a.is_unspecified()
        && !a.is_loopback()
        && !a.is_multicast()
        && !link_local_unicast(a)
        && !broadcast)
        .into()
}

fn parse_cidr(s: &str) -> Result<Cidr, String> {
    let invalid = || format!("network address {s:?} parse error during conversion from string");
    let (addr, prefix) = s.split_once('/').ok_or_else(invalid)?;
    let addr = parse_ip(addr).map_err(|_| invalid())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= max && !prefix.starts_with('+'))
        .ok_or_else(invalid)?;
    Ok(Cidr { addr, prefix })
}

fn bits(addr: &IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => u128::from(u32::from(*v4)),
        IpAddr::V6(v6) => u128::from(*v6),
    }
}

impl Cidr {
    fn width(&self) -> u32 {
        if self.addr.is_ipv4() { 32 } else { 128 }
    }

    fn mask(&self) -> u128 {
        let host_bits = self.width() - u32::from(self.prefix);
        let all = if self.width() == 32 {
            u128::from(u32::MAX)
        } else {
            u128::MAX
        };
        all.checked_shr(host_bits).map_or(0, |m| m << host_bits) & all
    }

    fn contains(&self, addr: &IpAddr) -> bool {
        addr.is_ipv4() == self.addr.is_ipv4()
            && bits(addr) & self.mask() == bits(&self.addr) & self.mask()
    }

    fn network(&self) -> IpAddr {
        let b = bits(&self.addr) & self.mask();
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4((b as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(b.into()),
        }
    }
}

fn cidr(s: &CelString<'_>) -> Result<Cidr, ExecutionError> {
    parse_cidr(s.inner()).map_err(|e| error("cidr", e))
}

fn is_cidr(s: &CelString<'_>) -> CelBool {
    parse_cidr(s.inner()).is_ok().into()
}

fn cidr_string(c: &Cidr) -> CelString<'static> {
    format!("{}/{}", c.addr, c.prefix).into()
}

fn contains_ip(c: &Cidr, ip: &Ip) -> CelBool {
    c.contains(&ip.0).into()
}

fn contains_ip_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let addr = parse_ip(s.inner()).map_err(|e| error("containsIP", e))?;
    Ok(c.contains(&addr).into())
}

fn contains_cidr(c: &Cidr, other: &Cidr) -> CelBool {
    (other.prefix >= c.prefix && c.contains(&other.addr)).into()
}

fn contains_cidr_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let other = parse_cidr(s.inner()).map_err(|e| error("containsCIDR", e))?;
    Ok(contains_cidr(c, &other))
}

fn cidr_ip(c: &Cidr) -> Ip {
    Ip(c.addr)
}

fn masked(c: &Cidr) -> Cidr {
    Cidr {
        addr: c.network(),
        prefix: c.prefix,
    }
}

fn prefix_length(c: &Cidr) -> CelInt {
    CelInt::from(i64::from(c.prefix))
}

// ---- quantities -------------------------------------------------------

/// A Kubernetes resource quantity (`resource.Quantity`), held exactly as a
/// count of nano-units (the smallest unit a quantity can carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

opaque!(Quantity, "kubernetes.Quantity");

impl Quantity {
    /// The quantity as a count of nano-units.
    pub fn nanos(self) -> i128 {
        self.0
    }
}

const NANO: i128 = 1_000_000_000;

/// Parses a quantity as upstream's `resource.ParseQuantity` does: a signed
/// decimal number and a binary-SI (`Ki`…`Ei`), decimal-SI (`n`…`E`) or
/// exponent (`e3`) suffix. Precision below a nano-unit rounds up, as
/// upstream does.
pub fn parse_quantity(s: &str) -> Result<Quantity, String> {
    let invalid = || {
        format!(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {s:?}"
        )
    };
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(num_end);
    let (negative, digits) = match number.as_bytes().first() {
        Some(b'-') => (true, &number[1..]),
        Some(b'+') => (false, &number[1..]),
        _ => (false, number),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part.chars().all(|c| c.is_ascii_digit())
        || !frac_part.chars().all(|c| c.is_ascii_digit())
    {
        return Err(invalid());
    }
    // value = mantissa * 10^exp10 * 2^exp2
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        e if e.starts_with(['e', 'E']) => (e[1..].parse::<i32>().map_err(|_| invalid())?, 0),
        _ => return Err(invalid()),
    };
    let too_large = || format!("quantity {s:?} is too large");
    let mantissa: i128 = format!("{int_part}{frac_part}")
        .trim_start_matches('0')
        .parse()
        .or_else(|e: std::num::ParseIntError| {
            if matches!(e.kind(), std::num::IntErrorKind::Empty) {
                Ok(0)
            } else {
                Err(too_large())
            }
        })?;
    // nanos = mantissa * 2^exp2 * 10^(exp10 + 9 - frac digits)
    // In i64: an exponent near i32's bounds must not overflow.
    let scale = i64::from(exp10) + 9 - frac_part.len() as i64;
    let power = |s: i64| u32::try_from(s).ok().and_then(|s| 10i128.checked_pow(s));
    let mut value = mantissa
        .checked_shl(exp2)
        .filter(|v| v >> exp2 == mantissa)
        .ok_or_else(too_large)?;
    if scale >= 0 {
        value = power(scale)
            .and_then(|p| value.checked_mul(p))
            .ok_or_else(too_large)?;
    } else {
        let divisor = power(-scale).unwrap_or(i128::MAX);
        value = value / divisor + i128::from(value % divisor != 0);
    }
    Ok(Quantity(if negative { -value } else { value }))
}

fn quantity(s: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    parse_quantity(s.inner()).map_err(|e| error("quantity", e))
}

fn is_quantity(s: &CelString<'_>) -> CelBool {
    parse_quantity(s.inner()).is_ok().into()
}

fn is_integer(q: &Quantity) -> CelBool {
    (q.0 % NANO == 0 && i64::try_from(q.0 / NANO).is_ok()).into()
}

fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    if q.0 % NANO != 0 {
        return Err(error("asInteger", "cannot convert value to integer"));
    }
    i64::try_from(q.0 / NANO)
        .map(CelInt::from)
        .map_err(|_| error("asInteger", "cannot convert value to integer"))
}

fn as_approximate_float(q: &Quantity) -> CelDouble {
    (q.0 as f64 / NANO as f64).into()
}

fn sign(q: &Quantity) -> CelInt {
    CelInt::from(q.0.signum() as i64)
}

fn overflow(function: &str) -> ExecutionError {
    error(function, "quantity overflow")
}

fn add(a: &Quantity, b: &Quantity) -> Result<Quantity, ExecutionError> {
    a.0.checked_add(b.0)
        .map(Quantity)
        .ok_or_else(|| overflow("add"))
}

fn add_int(a: &Quantity, b: &CelInt) -> Result<Quantity, ExecutionError> {
    add(a, &Quantity(i128::from(*b.inner()) * NANO))
}

fn sub(a: &Quantity, b: &Quantity) -> Result<Quantity, ExecutionError> {
    a.0.checked_sub(b.0)
        .map(Quantity)
        .ok_or_else(|| overflow("sub"))
}

fn sub_int(a: &Quantity, b: &CelInt) -> Result<Quantity, ExecutionError> {
    sub(a, &Quantity(i128::from(*b.inner()) * NANO))
}

fn is_greater_than(a: &Quantity, b: &Quantity) -> CelBool {
    (a > b).into()
}

fn is_less_than(a: &Quantity, b: &Quantity) -> CelBool {
    (a < b).into()
}

fn compare_to(a: &Quantity, b: &Quantity) -> CelInt {
    CelInt::from(a.cmp(b) as i64)
}

#[cfg(test)]
mod tests {
    use super::parse_quantity;

    #[test]
    fn quantities_parse_exactly() {
        let q = |s: &str| parse_quantity(s).unwrap().0;
        assert_eq!(q("1"), 1_000_000_000);
        assert_eq!(q("1Gi"), (1i128 << 30) * 1_000_000_000);
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("1.5k"), q("1500"));
        assert_eq!(q("100m"), 100_000_000);
        assert_eq!(q("-2"), -2_000_000_000);
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("0.5Ki"), q("512"));
        assert_eq!(q("1n"), 1);
        assert_eq!(q("0.1n"), 1, "rounds up to a nano-unit");
        for bad in ["", "abc", "1Gb", "1.2.3", "--1", "1 Gi", "e3"] {
            assert!(parse_quantity(bad).is_err(), "{bad:?}");
        }
    }
}
