// The errors this reader raises. Every refusal is a ZarcError subclass naming what is at fault;
// the class names follow the Python library's (spec README section 7).

export class ZarcError extends Error {
  constructor(message) {
    super(message);
    this.name = this.constructor.name;
  }
}
/** The bytes are not a zip archive at all, or its end records are broken. */
export class NotAZipError extends ZarcError {}
/** Malformed data: the file breaks a rule of the spec. */
export class FormatError extends ZarcError {}
/** A checksum or a decoded size does not match. */
export class IntegrityError extends ZarcError {}
/** The file asks for more than the reader's limits allow, or breaks a safety rule. */
export class UnsafeArchiveError extends ZarcError {}
/** A `$ref` names a member the archive does not have. */
export class MemberNotFoundError extends ZarcError {}
/** The file is newer than this reader. */
export class VersionError extends ZarcError {}
