"""API errors as the apiserver answers them: a ``Status`` object and its HTTP code."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """One failed API call; ``status()`` is the body the apiserver sends."""

    def __init__(self, code: int, reason: str, message: str,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": self.message,
                                "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body

    # The apiserver names an object as ``<plural>.<group> "<name>"``.
    @staticmethod
    def _what(group: str, plural: str, name: str) -> tuple[str, dict[str, Any]]:
        resource = f"{plural}.{group}" if group else plural
        details: dict[str, Any] = {"name": name, "kind": plural}
        if group:
            details["group"] = group
        return f'{resource} "{name}"', details

    @classmethod
    def not_found(cls, group: str, plural: str, name: str) -> ApiError:
        what, details = cls._what(group, plural, name)
        return cls(404, "NotFound", f"{what} not found", details)

    @classmethod
    def already_exists(cls, group: str, plural: str, name: str) -> ApiError:
        what, details = cls._what(group, plural, name)
        return cls(409, "AlreadyExists", f"{what} already exists", details)

    @classmethod
    def conflict(cls, group: str, plural: str, name: str) -> ApiError:
        what, details = cls._what(group, plural, name)
        return cls(409, "Conflict", f"Operation cannot be fulfilled on {what}: the object has "
                   "been modified; please apply your changes to the latest version and try "
                   "again", details)

    @classmethod
    def invalid(cls, kind: str, group: str, name: str,
                causes: list[tuple[str, str]]) -> ApiError:
        """422: ``causes`` are (field, message) pairs."""
        qualified = f"{kind}.{group}" if group else kind
        text = "; ".join(f"{field}: {message}" if field else message for field, message in causes)
        details = {"name": name, "kind": kind,
                   "causes": [{"reason": "FieldValueInvalid", "message": message,
                               "field": field} for field, message in causes]}
        if group:
            details["group"] = group
        return cls(422, "Invalid", f'{qualified} "{name}" is invalid: {text}', details)

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @classmethod
    def unprocessable(cls, message: str) -> ApiError:
        """422 without an object: a JSON patch that does not apply (a failed ``test``)."""
        return cls(422, "Invalid", message)
