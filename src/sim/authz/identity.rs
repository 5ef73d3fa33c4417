//! Who a request is: a username, an optional uid and groups, as kube-apiserver's
//! authenticators make them. A ServiceAccount's username is `system:serviceaccount:NS:NAME`
//! and it belongs to `system:serviceaccounts` and `system:serviceaccounts:NS`; every
//! authenticated user belongs to `system:authenticated`.

/// The group whose members every request is allowed to (kube-apiserver's privileged group).
pub const SUPERUSERS: &str = "system:masters";
/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The username of the simulator's admin (its `--token`).
pub const ADMIN: &str = "admin";

/// A user: name, uid and groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The username.
    pub name: String,
    /// The uid, if any.
    pub uid: Option<String>,
    /// Every group the user belongs to.
    pub groups: Vec<String>,
}

impl Identity {
    /// The simulator's admin: a member of `system:masters`, allowed everything.
    pub fn admin() -> Self {
        Self {
            name: ADMIN.into(),
            uid: None,
            groups: vec![SUPERUSERS.into(), AUTHENTICATED.into()],
        }
    }

    /// An authenticated user with `groups`, plus a ServiceAccount's groups when `name` is
    /// one, plus `system:authenticated`.
    pub fn authenticated(name: &str, uid: Option<String>, groups: &[String]) -> Self {
        let mut identity = Self {
            name: name.into(),
            uid,
            groups: groups.to_vec(),
        };
        if let Some((namespace, _)) = service_account(name) {
            identity.add_group("system:serviceaccounts");
            identity.add_group(&format!("system:serviceaccounts:{namespace}"));
        }
        identity.add_group(AUTHENTICATED);
        identity
    }

    /// Adds `group` unless the user is already in it.
    pub fn add_group(&mut self, group: &str) {
        if !self.groups.iter().any(|g| g == group) {
            self.groups.push(group.into());
        }
    }

    /// Whether the user belongs to `system:masters`.
    pub fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == SUPERUSERS)
    }
}

/// The namespace and name of a ServiceAccount username (`system:serviceaccount:NS:NAME`).
pub fn service_account(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    let valid = !namespace.is_empty() && !name.is_empty() && !name.contains(':');
    valid.then_some((namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_gets_its_groups() {
        let id = Identity::authenticated("system:serviceaccount:team-a:runner", None, &[]);
        assert_eq!(
            id.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:team-a",
                "system:authenticated"
            ]
        );
        let alice = Identity::authenticated("alice", None, &["dev".into()]);
        assert_eq!(alice.groups, ["dev", "system:authenticated"]);
        assert!(!alice.is_superuser());
        assert!(Identity::admin().is_superuser());
    }

    #[test]
    fn service_account_names_are_taken_apart() {
        assert_eq!(
            service_account("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        assert_eq!(service_account("system:serviceaccount:ns"), None);
        assert_eq!(service_account("system:serviceaccount::sa"), None);
        assert_eq!(service_account("alice"), None);
    }
}
