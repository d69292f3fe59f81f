//! IP ranges (`10.96.0.0/12`, `fd00::/108`) as Service IP allocation uses them: parsing in
//! canonical form, membership, size, and the n-th address.

use std::net::IpAddr;

/// A parsed CIDR: its network address (host bits zero) and prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub network: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix`; the address must be the network address, as upstream requires
    /// of ServiceCIDRs.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, prefix) = text
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR address: {text}"))?;
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("invalid CIDR address: {text}"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("invalid CIDR address: {text}"))?;
        let bits = bits(&ip);
        if prefix > bits {
            return Err(format!("invalid CIDR address: {text}"));
        }
        let c = Cidr {
            network: ip,
            prefix,
        };
        if c.nth(0) != Some(ip) {
            return Err(format!(
                "invalid CIDR address: {text}: the address must be the network address"
            ));
        }
        Ok(c)
    }

    pub fn is_ipv4(&self) -> bool {
        self.network.is_ipv4()
    }

    fn base(&self) -> u128 {
        match self.network {
            IpAddr::V4(a) => u32::from(a) as u128,
            IpAddr::V6(a) => u128::from(a),
        }
    }

    /// How many addresses the range holds (saturating at `u128::MAX`).
    pub fn size(&self) -> u128 {
        let host = bits(&self.network) - self.prefix;
        if host >= 128 {
            u128::MAX
        } else {
            1u128 << host
        }
    }

    /// The address at `offset` from the network address, if inside the range (with host
    /// bits of the network address cleared).
    pub fn nth(&self, offset: u128) -> Option<IpAddr> {
        let host = bits(&self.network) - self.prefix;
        let mask = if host >= 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        };
        if offset > mask {
            return None;
        }
        let n = (self.base() & !mask) | offset;
        Some(match self.network {
            IpAddr::V4(_) => IpAddr::V4((n as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(n.into()),
        })
    }

    /// The offset of `ip` in the range, if it is inside.
    pub fn offset_of(&self, ip: &IpAddr) -> Option<u128> {
        if ip.is_ipv4() != self.is_ipv4() {
            return None;
        }
        let v = match ip {
            IpAddr::V4(a) => u32::from(*a) as u128,
            IpAddr::V6(a) => u128::from(*a),
        };
        let o = v.wrapping_sub(self.base());
        (v >= self.base() && o < self.size()).then_some(o)
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.offset_of(ip).is_some()
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn bits(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let c = Cidr::parse("10.96.0.0/12").unwrap();
        assert_eq!(c.size(), 1 << 20);
        assert_eq!(c.nth(1).unwrap().to_string(), "10.96.0.1");
        assert_eq!(c.nth((1 << 20) - 1).unwrap().to_string(), "10.111.255.255");
        assert!(c.nth(1 << 20).is_none());
        assert!(c.contains(&"10.100.1.2".parse().unwrap()));
        assert!(!c.contains(&"10.112.0.0".parse().unwrap()));
        assert_eq!(c.offset_of(&"10.96.1.0".parse().unwrap()), Some(256));
        assert!(Cidr::parse("10.96.0.1/12").is_err());
        assert!(Cidr::parse("10.96.0.0/33").is_err());
        let v6 = Cidr::parse("fd00::/108").unwrap();
        assert_eq!(v6.size(), 1 << 20);
        assert_eq!(v6.nth(10).unwrap().to_string(), "fd00::a");
    }
}
