//! The credentials a call is signed with: the key pair of the config, or temporary ones
//! from STS `AssumeRoleWithWebIdentity` for a web identity token (IRSA), kept by the
//! instance until 5 minutes before they expire.
//!
//! # Decision: the token comes in the config, the exchange is the plugin's
//!
//! The plugin has no file system. The daemon reads the projected token file for it
//! (`valueFrom: {file: …}`, re-read when the kubelet rotates it, which replaces the
//! handler's instances as a rotated Secret does) and redacts it like any Secret value; the
//! plugin makes the STS call itself, to the STS endpoint its `capabilities.http` allows.
//! So the daemon holds no AWS credentials and the plugin no more than it was given.

use std::cell::RefCell;

use sigv4::{Credentials, Scope};

use crate::aws::{self, Protocol, Refusal, Target, xml_tag, xml_unescape};
use crate::config::{self, WebIdentity};

/// How long before they expire temporary credentials are replaced.
const REFRESH_BEFORE: u64 = 300;

/// How long the assumed role's credentials are asked to last, in seconds.
const DURATION: &str = "3600";

/// Credentials from STS and when they expire.
struct Assumed {
    /// The role and a digest of the token they were assumed with.
    key: String,
    credentials: Credentials,
    expires: u64,
}

thread_local! {
    /// The instance's temporary credentials (kept while the instance is: use
    /// `instance: reuse`, or every event makes an STS call).
    static ASSUMED: RefCell<Option<Assumed>> = const { RefCell::new(None) };
}

/// The credentials to sign with now; `region` picks STS's default endpoint.
pub fn current(config: &config::Credentials, region: &str) -> Result<Credentials, Refusal> {
    if let Some(web) = &config.web_identity {
        return assumed(web, region);
    }
    let (Some(id), Some(secret)) = (&config.access_key_id, &config.secret_access_key) else {
        return Err(Refusal::Failed("config.credentials: no key pair".into()));
    };
    let credentials = Credentials::new(id, secret);
    Ok(match &config.session_token {
        Some(token) => credentials.with_session_token(token),
        None => credentials,
    })
}

/// Forgets the instance's temporary credentials (AWS said they expired).
pub fn forget() {
    ASSUMED.with(|a| *a.borrow_mut() = None);
}

/// The role's credentials: those kept, unless they expire within 5 minutes or were
/// assumed with another token; else new ones from STS.
fn assumed(web: &WebIdentity, region: &str) -> Result<Credentials, Refusal> {
    let key = format!(
        "{}\n{}",
        web.role_arn,
        sigv4::sha256_hex(web.token.as_bytes())
    );
    let now = aws::now();
    let kept = ASSUMED.with(|a| {
        a.borrow()
            .as_ref()
            .filter(|a| a.key == key && a.expires > now + REFRESH_BEFORE)
            .map(|a| a.credentials.clone())
    });
    if let Some(credentials) = kept {
        return Ok(credentials);
    }
    let (credentials, expires) = exchange(web, region)?;
    switchyard_sdk::log(
        switchyard_sdk::Level::Info,
        &format!(
            "assumed {} with the web identity token, until {}",
            web.role_arn,
            sigv4::amz_date(expires)
        ),
    );
    ASSUMED.with(|a| {
        *a.borrow_mut() = Some(Assumed {
            key,
            credentials: credentials.clone(),
            expires,
        })
    });
    Ok(credentials)
}

/// STS `AssumeRoleWithWebIdentity` (not signed: the token is the proof).
fn exchange(web: &WebIdentity, region: &str) -> Result<(Credentials, u64), Refusal> {
    let endpoint = web
        .sts_endpoint
        .clone()
        .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"));
    let body = aws::form(&[
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", &web.role_arn),
        (
            "RoleSessionName",
            web.session_name.as_deref().unwrap_or("switchyard"),
        ),
        ("WebIdentityToken", &web.token),
        ("DurationSeconds", DURATION),
    ]);
    let target = Target {
        endpoint: &endpoint,
        scope: Scope {
            region,
            service: "sts",
        },
        protocol: Protocol::Query,
    };
    let sts = |what: String| format!("STS AssumeRoleWithWebIdentity: {what}");
    let response = aws::call(&target, None, body.as_bytes()).map_err(|refusal| match refusal {
        // A refused token may be one the kubelet is about to rotate: retried, not permanent.
        Refusal::Refused(e) => Refusal::Failed(sts(format!(
            "AWS answered {} {}: {}",
            e.status, e.code, e.message
        ))),
        Refusal::Failed(e) | Refusal::TooLarge(_, e) => Refusal::Failed(sts(e)),
        throttled => throttled,
    })?;
    parse(&response.text()).map_err(|e| Refusal::Failed(sts(e)))
}

/// The credentials and their expiry from STS's XML answer.
fn parse(xml: &str) -> Result<(Credentials, u64), String> {
    let field = |name: &str| {
        xml_tag(xml, name)
            .map(|v| xml_unescape(v.trim()))
            .ok_or_else(|| format!("the answer has no {name}"))
    };
    let credentials = Credentials::new(&field("AccessKeyId")?, &field("SecretAccessKey")?)
        .with_session_token(&field("SessionToken")?);
    let expiration = field("Expiration")?;
    let expires = sigv4::parse_iso8601(&expiration)
        .ok_or_else(|| format!("Expiration {expiration:?} is not an ISO 8601 time"))?;
    Ok((credentials, expires))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>\
        <Credentials><SessionToken>tok&amp;en</SessionToken><SecretAccessKey>sec</SecretAccessKey>\
        <Expiration>2100-01-01T00:00:00Z</Expiration><AccessKeyId>ASIAEXAMPLE</AccessKeyId>\
        </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";

    #[test]
    fn sts_answers_give_temporary_credentials_and_their_expiry() {
        let (credentials, expires) = parse(ANSWER).unwrap();
        assert_eq!(
            credentials,
            Credentials::new("ASIAEXAMPLE", "sec").with_session_token("tok&en")
        );
        assert_eq!(expires, 4_102_444_800);
        assert_eq!(parse("<X/>").unwrap_err(), "the answer has no AccessKeyId");
    }
}
