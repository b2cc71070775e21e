"""(in progress)"""
import streamlit as st


def render() -> None:
    st.title("kernels")
